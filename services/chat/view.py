"""Turn session events into readable terminal lines."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

OPTIONS = ("allow_once", "allow_always", "reject_once", "reject_always")
LABELS = ("allow once", "always allow", "reject", "always reject")
MAX_ARG = 120


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.replace("\n", "⏎")
    return text if len(text) <= MAX_ARG else text[: MAX_ARG - 1] + "…"


class View:
    """Prints events; message deltas stream on one line until the message ends."""

    def __init__(self, out: TextIO = sys.stdout, color: bool | None = None) -> None:
        self._out = out
        tty = out.isatty() and "NO_COLOR" not in os.environ
        self._color = tty if color is None else color
        self._inline = False  # a message is being streamed on the current line
        self._thinking = False

    def _c(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self._color else text

    def line(self, text: str) -> None:
        """Print a whole line (ending any streamed message first)."""
        self._end_inline()
        self._out.write(text + "\n")
        self._out.flush()

    def _end_inline(self) -> None:
        if self._inline:
            self._out.write("\n")
            self._inline = False

    def show(self, ev: dict[str, Any]) -> None:
        """Render one event."""
        kind, data = str(ev.get("type")), ev.get("data") or {}
        handler = getattr(self, "_" + kind.replace(".", "_"), None)
        if handler is not None:
            handler(data)
        elif kind not in {"worker.assigned", "worker.released", "policy.updated"}:
            self.line(self._c("2", f"· {kind}"))

    def _session_created(self, d: dict[str, Any]) -> None:
        self.line(self._c("2", f"· session opened: {d.get('title') or '(untitled)'}"))

    def _session_closed(self, d: dict[str, Any]) -> None:
        self.line(self._c("33", f"· session closed ({d.get('reason', '')})"))

    def _user_prompt(self, d: dict[str, Any]) -> None:
        self.line(self._c("1;34", "you> ") + str(d.get("text", "")))

    def _turn_started(self, d: dict[str, Any]) -> None:
        self._thinking = False

    def _turn_ended(self, d: dict[str, Any]) -> None:
        extra = f": {d['message']}" if d.get("message") else ""
        self.line(self._c("2", f"— turn ended ({d.get('stop_reason')}){extra}"))

    def _turn_cancel_requested(self, d: dict[str, Any]) -> None:
        self.line(self._c("33", "· stop requested"))

    def _agent_thought_delta(self, d: dict[str, Any]) -> None:
        if not self._thinking:
            self.line(self._c("2;3", "(thinking…)"))
            self._thinking = True

    def _agent_message_delta(self, d: dict[str, Any]) -> None:
        if not self._inline:
            self._out.write(self._c("1;32", "agent> "))
            self._inline = True
        self._out.write(str(d.get("text", "")))
        self._out.flush()

    def _agent_message(self, d: dict[str, Any]) -> None:
        self._thinking = False
        if self._inline:
            self._end_inline()
            return
        self.line(self._c("1;32", "agent> ") + str(d.get("text", "")))

    def _tool_call(self, d: dict[str, Any]) -> None:
        args = " ".join(f"{k}={_short(v)}" for k, v in (d.get("args") or {}).items())
        self.line(self._c("36", f"⚙ {d.get('tool')}") + f" {args}")

    def _tool_update(self, d: dict[str, Any]) -> None:
        if d.get("stream") == "status":
            return
        for text in str(d.get("text", "")).splitlines():
            self.line(self._c("2", f"  │ {text}"))

    def _tool_result(self, d: dict[str, Any]) -> None:
        if d.get("ok"):
            code = d.get("exit_code")
            self.line(
                self._c(
                    "32", "  ✓ ok" + (f" (exit {code})" if code is not None else "")
                )
            )
        else:
            self.line(self._c("31", f"  ✗ {d.get('error') or 'failed'}"))

    def _permission_requested(self, d: dict[str, Any]) -> None:
        args = " ".join(f"{k}={_short(v)}" for k, v in (d.get("args") or {}).items())
        self.line(self._c("1;33", f"? allow {d.get('tool')} {args}"))
        choices = "  ".join(f"[{i}] {label}" for i, label in enumerate(LABELS, 1))
        self.line(self._c("33", f"  {choices}  (request {d.get('request_id')})"))

    def _permission_resolved(self, d: dict[str, Any]) -> None:
        self.line(self._c("2", f"· answered: {str(d.get('option')).replace('_', ' ')}"))

    def _sandbox_state(self, d: dict[str, Any]) -> None:
        self.line(self._c("2", f"· sandbox {d.get('state')}"))

    def _error(self, d: dict[str, Any]) -> None:
        self.line(self._c("31", f"! {d.get('code')}: {d.get('message')}"))
