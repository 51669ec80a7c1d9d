"""The App API's request and response bodies (api.md); OpenAPI is generated from these.

Request Structs forbid unknown fields, so a typo is a 422 naming the field, not
a silently ignored option.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from schemas.files import DirEntry

OptionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]
SessionStatus = Literal["idle", "running", "awaiting_permission", "closed"]

Title = Annotated[str, msgspec.Meta(max_length=200)]
MetaKey = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
MetaValue = Annotated[str, msgspec.Meta(max_length=1024)]
ClientMsgId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class Request(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every request body."""


class CreateSession(Request, frozen=True, kw_only=True):
    """``POST /v1/sessions``."""

    title: Title = ""
    metadata: Annotated[dict[MetaKey, MetaValue], msgspec.Meta(max_length=64)] = {}


class SendPrompt(Request, frozen=True, kw_only=True):
    """``POST /v1/sessions/{sid}/prompt``; the same ``client_msg_id`` is one prompt."""

    text: Annotated[str, msgspec.Meta(min_length=1)]
    client_msg_id: ClientMsgId | None = None


class AnswerPermission(Request, frozen=True, kw_only=True):
    """``POST /v1/sessions/{sid}/permissions/{request_id}``."""

    option: OptionKind


class Session(msgspec.Struct, frozen=True, kw_only=True):
    """A session as the App sees it; status and last_seq come from its log."""

    session_id: str
    title: str
    created_at: str
    status: SessionStatus
    last_seq: int
    queued: int
    sandbox: str
    metadata: dict[str, str]


class SessionList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``GET /v1/sessions``: the device's sessions, newest first.

    Paged (``?limit=&cursor=``): ``next_cursor`` asks for the next page; it is
    absent on the last page and on the unpaged listing.
    """

    sessions: list[Session]
    next_cursor: str | None = None


class PromptAccepted(msgspec.Struct, frozen=True, kw_only=True):
    """A prompt is in the log at ``seq``; its turn is ``turn_id``."""

    seq: int
    turn_id: str


class Appended(msgspec.Struct, frozen=True, kw_only=True):
    """A command is in the log at ``seq``."""

    seq: int


class Health(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /healthz``."""

    status: Literal["ok"] = "ok"


class ErrorDetail(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What went wrong; ``field`` is a JSON path into the request (``$.text``)."""

    code: str
    message: str
    field: str | None = None


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    """Every error answer."""

    error: ErrorDetail


class DirListing(msgspec.Struct, frozen=True, kw_only=True):
    """``GET …/files/{path}`` on a directory."""

    entries: list[DirEntry]


class Resync(msgspec.Struct, frozen=True, kw_only=True):
    """``event: resync``: the cursor is unservable; resuming after ``resume_after``.

    ``first_available``..``last`` is what the server holds now.
    """

    reason: str
    first_available: int
    last: int
    resume_after: int
