"""Messages between workers/pool and the broker over NATS (no HTTP between them).

Bind (request/reply on ``<prefix>.broker.bind``): a worker presents its id and a
one-time token; the broker finds the session the pool assigned that worker in
the assignments bucket (the worker never names the session), makes sure the
sandbox runs, and answers with the envd URL, a sandbox-scoped access token with
an expiry, and the next one-time token (each bind consumes one).
"""

from __future__ import annotations

from typing import Literal

import msgspec


class Assignment(msgspec.Struct, frozen=True, kw_only=True):
    """KV ``<prefix>_assign`` record, key = worker id; written by the pool only.

    ``token_sha256`` is the hex SHA-256 of the worker's current one-time bind
    token; the broker replaces it (revision CAS) when it hands out the next one.
    ``prev_token_sha256`` and ``last_request_id`` remember the bind that
    consumed the previous token, so a retry of that same request (the asker did
    not hear the answer) is answered again instead of refused as a reuse.
    """

    worker_id: str
    session_id: str
    token_sha256: str
    assigned_at: str
    state: Literal["assigned", "released"] = "assigned"
    host: str = ""
    pid: int = 0
    prev_token_sha256: str = ""
    last_request_id: str = ""


class BindRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A worker asks for its session's sandbox.

    ``request_id`` (client-chosen, unique per bind) makes the request
    idempotent: retried with the same id and token, it gets the same grant.
    """

    worker_id: str
    token: str
    request_id: str = ""


class BindGrant(msgspec.Struct, frozen=True, kw_only=True):
    """Where and how to reach the sandbox, until ``expires_at`` (unix seconds)."""

    session_id: str
    sandbox_id: str
    envd_url: str
    access_token: str | None
    expires_at: float
    next_token: str
    rebuilt: bool = False
    notice: str | None = None


class BindRefused(msgspec.Struct, frozen=True, kw_only=True):
    """Why a bind was refused (``token_reused``, ``not_assigned`` …)."""

    code: str
    message: str


class BindReply(msgspec.Struct, frozen=True, kw_only=True):
    """Either a grant or a refusal."""

    grant: BindGrant | None = None
    refused: BindRefused | None = None


class Activity(msgspec.Struct, frozen=True, kw_only=True):
    """Published on ``<prefix>.broker.ctl.activity`` while work is in flight.

    A tool or model call in flight, or a file API request, resets the idle
    clock (T2); worker lease heartbeats do not. ``hold_s`` > 0 also keeps the
    sandbox from being paused for that long whatever T2 is (a running tool
    renews it with each report, so it is never paused mid-call).
    """

    session_id: str
    kind: Literal["tool", "model", "file"]
    worker_id: str | None = None
    hold_s: float = 0.0


class ForkRequest(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """Gateway → broker: start ``session_id``'s workspace from ``parent``'s
    latest turn-end save at or before ``at_seq``."""

    parent_session_id: str
    session_id: str
    at_seq: int


class SaveRequest(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """Worker → broker: save the workspace now, as of ``turn_id``'s end (asked
    just before the worker appends that turn's ``turn.ended``)."""

    worker_id: str
    session_id: str
    turn_id: str


class SaveReply(msgspec.Struct, frozen=True, kw_only=True):
    """The save taken (``manifest`` empty: there was nothing to save)."""

    ok: bool = True
    manifest: str = ""
    error: str = ""


class ForkReply(msgspec.Struct, frozen=True, kw_only=True):
    """Which save the fork starts from (None: there was none; empty workspace)."""

    ok: bool = True
    manifest: str | None = None
    turn_seq: int | None = None
    error: str = ""
