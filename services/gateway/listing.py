"""``GET /v1/sessions?limit=&cursor=``: one page of the device's sessions.

The records come from :class:`eventstore.pages.SessionPages`; the page's
summaries come from the summary cache, whose cached entries are confirmed
current by one batched request (``heads.py``) and the rest looked up
concurrently, so a warm page costs about one round trip, not ``limit``.
"""

from __future__ import annotations

from aiohttp import web

from eventstore.pages import BadCursorError, SessionPages
from schemas.api import Session, SessionList
from services.gateway.commands import SessionCommands
from services.gateway.errors import InvalidRequestError

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def paged(request: web.Request) -> bool:
    """Whether the listing asks for a page (``limit`` or ``cursor`` given)."""
    return "limit" in request.query or "cursor" in request.query


def limit_of(request: web.Request) -> int:
    """``?limit=`` in 1..MAX_LIMIT (DEFAULT_LIMIT when absent)."""
    text = request.query.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text[:6]) <= MAX_LIMIT:
        raise InvalidRequestError(
            f"limit is an integer from 1 to {MAX_LIMIT}", "$.limit"
        )
    return int(text)


async def list_page(
    request: web.Request,
    device_id: str,
    pages: SessionPages,
    commands: SessionCommands,
) -> SessionList:
    """The page the query asks for, newest first."""
    limit = limit_of(request)
    cursor = request.query.get("cursor") or None
    try:
        records, next_cursor = await pages.page(device_id, limit, cursor)
    except BadCursorError as exc:
        raise InvalidRequestError(str(exc), "$.cursor") from exc
    sessions: list[Session] = await commands.views(records)
    return SessionList(sessions=sessions, next_cursor=next_cursor)
