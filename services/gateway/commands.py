"""App commands as events (design §3): create, prompt, cancel, answer, close.

The gateway decides from the folded log and appends; it never talks to the pool
or the broker. Decisions that depend on state (cancel, answer, close) append with
``expected_seq`` = the seq they were decided at, so two concurrent answers to one
permission request can never both land.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from eventstore.errors import ConcurrencyError
from eventstore.fold import SessionSummary
from eventstore.index import SessionIndex, SessionRecord
from eventstore.log import JetStreamLog
from schemas.api import OptionKind, PromptAccepted, Session
from schemas.events import (
    Payload,
    PermissionResolved,
    SessionClosed,
    SessionCreated,
    TurnCancelRequested,
    UserPrompt,
)
from schemas.ids import new_id
from services.gateway.errors import ConflictError, GatewayError, SessionNotFoundError
from services.gateway.summaries import SummaryCache

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A decision retried this often without landing means the log is too busy.
MAX_DECIDE_ATTEMPTS = 50
# Summaries looked up at once by the unpaged listing (as one page of 200).
LIST_CHUNK = 200

_ANSWER = msgspec.json.Decoder(PromptAccepted)


class NotPending(GatewayError):
    """Internal: no such pending permission request (404)."""

    def __init__(self) -> None:
        super().__init__(404, "permission_not_found", "no such permission request")


class SessionCommands:
    """Everything the App can do to a session, over the log, the index and KV."""

    def __init__(
        self,
        log: JetStreamLog,
        index: SessionIndex,
        summaries: SummaryCache,
        idempotency: KeyValue,
    ) -> None:
        self._log = log
        self._index = index
        self._summaries = summaries
        self._idem = idempotency

    @property
    def log(self) -> JetStreamLog:
        """The session log (forks append to a new one)."""
        return self._log

    @property
    def index(self) -> SessionIndex:
        """The session index."""
        return self._index

    # --- reads ------------------------------------------------------------------

    async def owned(self, session_id: str, device_id: str) -> SessionRecord:
        """The session's record if ``device_id`` owns it; else the one 404."""
        if not SESSION_ID.match(session_id):
            raise SessionNotFoundError()
        record = await self._index.get(session_id)
        if record is None or record.device_id != device_id:
            raise SessionNotFoundError()
        return record

    async def view(self, record: SessionRecord) -> Session:
        """The App's ``Session``, status and last_seq folded from the log."""
        return to_session(record, await self._summaries.get(record.session_id))

    async def views(self, records: list[SessionRecord]) -> list[Session]:
        """The App's ``Session`` of several records (a listing page)."""
        summaries = await self._summaries.many([r.session_id for r in records])
        return [to_session(r, s) for r, s in zip(records, summaries, strict=True)]

    async def list(self, device_id: str) -> list[Session]:
        """The device's sessions, newest first (summaries a page at a time)."""
        records = await self._index.list(device_id)
        sessions: list[Session] = []
        for at in range(0, len(records), LIST_CHUNK):
            sessions += await self.views(records[at : at + LIST_CHUNK])
        return sessions

    # --- commands ---------------------------------------------------------------

    async def create(
        self, device_id: str, title: str, metadata: dict[str, str]
    ) -> Session:
        """Append ``session.created`` to a new log (seq 1), then index it."""
        session_id = new_id("s")
        payload = SessionCreated(device_id=device_id, title=title, metadata=metadata)
        stored = await self._log.append(
            session_id, payload, actor=actor(device_id), expected_seq=0
        )
        event = stored.event()
        record = SessionRecord(
            session_id=session_id,
            device_id=device_id,
            title=title,
            created_at=event.ts,
            metadata=metadata,
        )
        await self._index.add(record)
        return await self.view(record)

    async def prompt(
        self, record: SessionRecord, text: str, client_msg_id: str | None
    ) -> PromptAccepted:
        """Append ``user.prompt``; the same ``client_msg_id`` answers the first seq."""
        sid = record.session_id
        if client_msg_id is None:
            return await self._append_prompt(record, text, new_id("t"), None, None)
        digest = hashlib.sha256(f"{sid}\0{client_msg_id}".encode()).hexdigest()
        key = f"{sid}.{digest[:32]}"
        known = await self._remembered(key)
        if known is not None:
            return known
        # Ids derived from (sid, client_msg_id): a retry after a crash between the
        # append and the KV write is deduplicated by Nats-Msg-Id.
        answer = await self._append_prompt(
            record, text, f"t_{digest[:20]}", f"ev_{digest[:40]}", client_msg_id
        )
        try:
            await self._idem.create(key, msgspec.json.encode(answer))
        except KeyWrongLastSequenceError:
            # A concurrent identical request wrote first: its answer is the answer.
            return await self._remembered(key) or answer
        return answer

    async def _append_prompt(
        self,
        record: SessionRecord,
        text: str,
        turn_id: str,
        event_id: str | None,
        client_msg_id: str | None,
    ) -> PromptAccepted:
        summary = await self._summaries.get(record.session_id)
        if summary.closed:
            raise ConflictError("session_closed", "the session is closed")
        payload = UserPrompt(text=text, turn_id=turn_id, client_msg_id=client_msg_id)
        stored = await self._log.append(
            record.session_id, payload, actor=actor(record.device_id), event_id=event_id
        )
        landed = stored.event().data
        # A deduplicated retry answers with the turn id that was stored first.
        stored_turn = landed.turn_id if isinstance(landed, UserPrompt) else turn_id
        return PromptAccepted(seq=stored.seq, turn_id=stored_turn)

    async def _remembered(self, key: str) -> PromptAccepted | None:
        try:
            entry = await self._idem.get(key)
        except KeyNotFoundError:
            return None
        return _ANSWER.decode(entry.value) if entry.value else None

    async def cancel(self, record: SessionRecord) -> int:
        """Append ``turn.cancel_requested`` for the running (or next) turn; else 409."""

        def decide(summary: SessionSummary) -> Payload:
            turn = summary.current_turn
            if summary.closed or turn is None:
                raise ConflictError("no_turn_running", "no turn is running")
            return TurnCancelRequested(turn_id=turn)

        return await self._decide(record, decide)

    async def answer(
        self, record: SessionRecord, request_id: str, option: OptionKind
    ) -> int:
        """Append ``permission.resolved``; 409 if already resolved, 404 if unknown."""

        def decide(summary: SessionSummary) -> Payload:
            if request_id in summary.resolved_permissions:
                raise ConflictError("already_resolved", "already answered")
            if request_id not in summary.pending_permissions:
                raise NotPending()
            return PermissionResolved(request_id=request_id, option=option)

        return await self._decide(record, decide)

    async def close(self, record: SessionRecord) -> Session:
        """Append ``session.closed`` once; closing a closed session changes nothing."""

        def decide(summary: SessionSummary) -> Payload | None:
            return None if summary.closed else SessionClosed(reason="deleted")

        await self._decide(record, decide)
        return await self.view(record)

    async def _decide(
        self, record: SessionRecord, decide: Callable[[SessionSummary], Payload | None]
    ) -> int:
        sid = record.session_id
        for _ in range(MAX_DECIDE_ATTEMPTS):
            summary = await self._summaries.get(sid)
            payload = decide(summary)
            if payload is None:
                return summary.last_seq
            try:
                stored = await self._log.append(
                    sid,
                    payload,
                    actor=actor(record.device_id),
                    expected_seq=summary.last_seq,
                )
            except ConcurrencyError as exc:
                if exc.actual < summary.last_seq:
                    # This writer's cached head is behind what we folded (another
                    # process appended): refresh it, then decide again.
                    await self._log.head(sid)
                continue  # the log moved on: decide again on the new state
            return stored.seq
        raise ConflictError("busy", "the session log is changing too fast; retry")


def actor(device_id: str) -> str:
    """The actor string of a device."""
    return f"device:{device_id}"


def to_session(record: SessionRecord, summary: SessionSummary) -> Session:
    """The App's view of a session."""
    return Session(
        session_id=record.session_id,
        title=record.title,
        created_at=record.created_at,
        status=summary.status,
        last_seq=summary.last_seq,
        queued=max(0, summary.queued),
        sandbox=summary.sandbox,
        metadata=record.metadata,
    )
