"""A tool's outcome as the log and the model see it, and the model's cap."""

from __future__ import annotations

import msgspec

MAX_OUTPUT_CHARS = 30 * 1024


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """A tool's result as the log and the model see it."""

    ok: bool
    output: str = ""
    error: str | None = None
    truncated: bool = False
    spill_path: str | None = None
    exit_code: int | None = None
    error_code: str | None = None


def bounded(text: str, note: str) -> tuple[str, bool]:
    """``text`` cut to the model's cap, with ``note`` saying how to get the rest."""
    if len(text) <= MAX_OUTPUT_CHARS:
        return text, False
    return text[:MAX_OUTPUT_CHARS] + f"\n… [{note}]", True
