"""Identifiers and timestamps in one format everywhere."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime


def new_id(prefix: str) -> str:
    """A random id such as ``s_3f9a…``: safe as a NATS subject token and a KV key."""
    return f"{prefix}_{secrets.token_hex(10)}"


def now_rfc3339() -> str:
    """The current UTC time as RFC 3339 with microseconds and a ``Z`` suffix."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
