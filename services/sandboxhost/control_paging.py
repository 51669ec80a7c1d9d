"""Shared pieces of the control plane: JSON bodies, list filters and paging."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from aiohttp import web

from services.sandboxhost.errors import ControlError
from services.sandboxhost.records import SandboxRecord

T = TypeVar("T")
MAX_LIMIT = 1000


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object (empty body → ``{}``)."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ControlError(400, f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ControlError(400, "body must be a JSON object")
    return body


def page(
    items: Sequence[T], query: Mapping[str, str]
) -> tuple[list[T], dict[str, str]]:
    """One page of ``items`` (``limit``, ``nextToken``) and its ``x-next-token``."""
    offset = _decode_token(query.get("nextToken", ""))
    raw_limit = query.get("limit") or "100"
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIMIT:
        raise ControlError(400, f"limit: expected 1..{MAX_LIMIT}, got {raw_limit!r}")
    limit = int(raw_limit)
    headers = {}
    if offset + limit < len(items):
        headers["x-next-token"] = _encode_token(offset + limit)
    return list(items[offset : offset + limit]), headers


class ListFilter:
    """The filters of ``GET /v2/sandboxes``: state, metadata, startedAfter, template."""

    def __init__(self, query: Mapping[str, str], default_states: set[str]) -> None:
        self.states = {s for s in query.get("state", "").split(",") if s} or set(
            default_states
        )
        bad = self.states - {"running", "paused"}
        if bad:
            raise ControlError(400, f"state: unknown {sorted(bad)}")
        self.meta = dict(parse_qsl(query.get("metadata", "")))
        self.template = query.get("template") or None
        self.started_after = _time(query.get("startedAfter"), "startedAfter")

    def matches(self, rec: SandboxRecord) -> bool:
        """True if the sandbox passes every filter."""
        if self.states and rec.state not in self.states:
            return False
        if self.template and self.template not in (rec.template_id, rec.alias):
            return False
        if self.started_after is not None and rec.started_at < self.started_after:
            return False
        return all(rec.metadata.get(k) == v for k, v in self.meta.items())


def _time(raw: str | None, name: str) -> float | None:
    if not raw:
        return None
    try:
        when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ControlError(400, f"{name}: expected an RFC 3339 time") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _encode_token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o{offset}".encode()).decode()


def _decode_token(token: str) -> int:
    if not token:
        return 0
    try:
        return int(base64.urlsafe_b64decode(token.encode()).decode()[1:])
    except (ValueError, UnicodeDecodeError) as exc:
        raise ControlError(400, "nextToken is invalid") from exc
