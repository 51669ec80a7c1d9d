"""The App API's request and response bodies (docs/api.md); OpenAPI is built from them.

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


class ForkSession(Request, frozen=True, kw_only=True):
    """``POST /v1/sessions/{sid}/fork``: a new session as the parent was at
    ``at_seq`` (conversation and workspace as of its last turn end at or
    before it)."""

    at_seq: Annotated[int, msgspec.Meta(ge=1)]
    title: Title | None = None


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


class StreamTicket(msgspec.Struct, frozen=True, kw_only=True):
    """``POST …/stream-ticket``: a one-use ``?ticket=`` for that session's events."""

    ticket: str
    expires_at: str


class TokenCounts(msgspec.Struct, frozen=True, kw_only=True):
    """Model tokens; ``cached`` is the part of ``input`` read from a prompt cache."""

    input: int = 0
    output: int = 0
    cached: int = 0


class SandboxSeconds(msgspec.Struct, frozen=True, kw_only=True):
    """Seconds a sandbox spent in each billed state."""

    running: float = 0.0
    paused: float = 0.0
    archived: float = 0.0


class UsageCost(msgspec.Struct, frozen=True, kw_only=True):
    """Cost in USD by item (the gateway's price table) and in total."""

    running: float = 0.0
    paused: float = 0.0
    archived: float = 0.0
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    cached_tokens: float = 0.0
    total: float = 0.0


class SessionUsage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/sessions/{sid}/usage``: what one session used and cost."""

    session_id: str
    tokens: TokenCounts
    model_seconds: float
    turns: int
    sandbox_seconds: SandboxSeconds
    # Archive bytes held over time (byte-seconds archived / 2^30 / 30 days).
    archive_gb_months: float
    cost: UsageCost


class DeviceUsage(msgspec.Struct, frozen=True, kw_only=True, rename={"from_": "from"}):
    """``GET /v1/usage?from=&to=``: the device's totals and each session's part."""

    from_: str
    to: str
    tokens: TokenCounts
    model_seconds: float
    turns: int
    sandbox_seconds: SandboxSeconds
    archive_gb_months: float
    cost: UsageCost
    sessions: list[SessionUsage]
