"""``POST /v1/sessions/{sid}/fork``: a new session branching from an event.

The fork is a new session of the same device. Its log: ``session.created``,
``session.forked`` (parent, ``at_seq``, the turn end the conversation and the
workspace are taken at, the workspace save), then copies of the parent's
conversation events through its last ``turn.ended`` at or before ``at_seq``
(live deltas, worker and sandbox events are not copied; a turn still open at
``at_seq`` is left out, so the fork starts idle). The broker seeds the fork's
workspace from the parent's turn-end save at that turn end (shared layers, no
copy) before any event is written; the parent is not touched.
"""

from __future__ import annotations

import msgspec
from nats.aio.client import Client

from eventstore.index import SessionRecord
from eventstore.log import StoredEvent
from schemas.api import ForkSession, Session
from schemas.broker import ForkReply, ForkRequest
from schemas.events import (
    AgentMessage,
    Event,
    PermissionRequested,
    PermissionResolved,
    PolicyUpdated,
    SessionCreated,
    SessionForked,
    ToolCall,
    ToolResult,
    TurnCancelRequested,
    TurnEnded,
    TurnStarted,
    UserPrompt,
)
from schemas.ids import new_id
from services.common.request import NoAnswerError, ask
from services.gateway.commands import SessionCommands, actor
from services.gateway.errors import GatewayError

COPIED = (
    UserPrompt,
    TurnStarted,
    TurnCancelRequested,
    AgentMessage,
    ToolCall,
    ToolResult,
    PermissionRequested,
    PermissionResolved,
    PolicyUpdated,
    TurnEnded,
)
RETRY_LATER = {"Retry-After": "10"}
_reply = msgspec.json.Decoder(ForkReply)


def conversation_through(events: list[StoredEvent], at_seq: int) -> list[Event]:
    """The parent's conversation events through its last turn end ≤ ``at_seq``."""
    decoded = [s.event() for s in events if s.seq <= at_seq]
    ends = [e.seq for e in decoded if isinstance(e.data, TurnEnded)]
    cut = max(ends, default=0)
    return [e for e in decoded if e.seq <= cut and isinstance(e.data, COPIED)]


class Forker:
    """Forks sessions: asks the broker for the workspace, then writes the log."""

    def __init__(
        self, nc: Client, commands: SessionCommands, timeout_s: float = 30.0
    ) -> None:
        self._nc = nc
        self._commands = commands
        self._timeout_s = timeout_s

    async def fork(self, parent: SessionRecord, body: ForkSession) -> Session:
        """The new session (201); 422 names ``at_seq`` when it is out of range."""
        log = self._commands.log
        events = await log.read(parent.session_id)
        last = events[-1].seq if events else 0
        if not 1 <= body.at_seq <= last:
            raise GatewayError(
                422, "invalid_request", f"at_seq must be in 1..{last}", field="$.at_seq"
            )
        copied = conversation_through(events, body.at_seq)
        cut = copied[-1].seq if copied else 0
        session_id = new_id("s")
        seed = await self._seed(parent.session_id, session_id, cut)
        title = body.title if body.title is not None else f"{parent.title} (fork)"
        device = parent.device_id
        created = SessionCreated(
            device_id=device, title=title[:200], metadata=parent.metadata
        )
        stored = await log.append(
            session_id, created, actor=actor(device), expected_seq=0
        )
        forked = SessionForked(
            parent_session_id=parent.session_id,
            at_seq=body.at_seq,
            conversation_seq=cut,
            copied_events=len(copied),
            workspace_manifest=seed.manifest,
            workspace_seq=seed.turn_seq,
        )
        await log.append(session_id, forked, actor=actor(device))
        for event in copied:
            await log.append(session_id, event.data, actor=event.actor)
        record = SessionRecord(
            session_id=session_id,
            device_id=device,
            title=title[:200],
            created_at=stored.event().ts,
            metadata=parent.metadata,
        )
        await self._commands.index.add(record)
        return await self._commands.view(record)

    async def _seed(self, parent_id: str, session_id: str, cut: int) -> ForkReply:
        request = ForkRequest(
            parent_session_id=parent_id, session_id=session_id, at_seq=cut
        )
        try:
            msg = await ask(
                self._nc,
                self._commands.log.names.broker_fork,
                msgspec.json.encode(request),
                total_s=self._timeout_s,
                retry_s=min(10.0, self._timeout_s),
            )
        except NoAnswerError as exc:
            raise GatewayError(
                503,
                "broker_unavailable",
                f"no broker answered: {exc.reason}",
                headers=RETRY_LATER,
            ) from exc
        reply = _reply.decode(msg.data)
        if not reply.ok:
            raise GatewayError(503, "fork_failed", reply.error, headers=RETRY_LATER)
        return reply
