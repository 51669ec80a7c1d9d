"""Identifiers and timestamps in one format everywhere."""

from __future__ import annotations

import secrets
import time


def new_id(prefix: str) -> str:
    """A random id such as ``s_3f9a…``: safe as a NATS subject token and a KV key."""
    return f"{prefix}_{secrets.token_hex(10)}"


# The formatted second of the last call: every event is stamped on the append
# path, and formatting only the microseconds costs a third of a datetime's
# ``isoformat``.
_second: tuple[int, str] = (-1, "")


def now_rfc3339() -> str:
    """The current UTC time as RFC 3339 with microseconds and a ``Z`` suffix."""
    global _second
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    if _second[0] != seconds:
        _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{_second[1]}.{micros:06d}Z"
