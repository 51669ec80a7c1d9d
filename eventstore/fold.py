"""Fold a session log into its summary: status, queue, sandbox, last seq.

Pure functions over decoded events (``evolve``), so the gateway, the projector
and ``audit`` agree on what a log means.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from eventstore.deadletter import DEAD_LETTERS, LogDeadLetter
from eventstore.reader import StoredEvent
from schemas.codec import EventDecodeError
from schemas.events import (
    Event,
    PermissionRequested,
    PermissionResolved,
    SandboxState,
    SessionClosed,
    SessionCreated,
    TurnEnded,
    TurnStarted,
    UserPrompt,
)

Status = Literal["idle", "running", "awaiting_permission", "closed"]


class SessionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the App's ``Session`` shows, derived from the log alone."""

    session_id: str = ""
    device_id: str = ""
    title: str = ""
    created_at: str = ""
    metadata: dict[str, str] = {}
    last_seq: int = 0
    closed: bool = False
    sandbox: str = "none"
    # turn ids of accepted prompts not yet ended, in prompt order
    open_turns: tuple[str, ...] = ()
    started_turn: str | None = None
    pending_permissions: frozenset[str] = frozenset()
    resolved_permissions: frozenset[str] = frozenset()

    @property
    def status(self) -> Status:
        """idle | running | awaiting_permission | closed."""
        if self.closed:
            return "closed"
        if self.pending_permissions:
            return "awaiting_permission"
        return "running" if self.open_turns else "idle"

    @property
    def queued(self) -> int:
        """Prompts accepted but not yet started."""
        return len(self.open_turns) - (1 if self.started_turn else 0)

    @property
    def current_turn(self) -> str | None:
        """The turn a cancel applies to: the running one, else the next queued."""
        return self.started_turn or (self.open_turns[0] if self.open_turns else None)


def evolve(state: SessionSummary, event: Event) -> SessionSummary:
    """The summary after one more event."""
    data = event.data
    new = msgspec.structs.replace(state, last_seq=event.seq)
    match data:
        case SessionCreated():
            return msgspec.structs.replace(
                new,
                session_id=event.session_id,
                device_id=data.device_id,
                title=data.title,
                metadata=data.metadata,
                created_at=event.ts,
            )
        case SessionClosed():
            return msgspec.structs.replace(new, closed=True)
        case UserPrompt():
            return msgspec.structs.replace(
                new, open_turns=(*new.open_turns, data.turn_id)
            )
        case TurnStarted():
            return msgspec.structs.replace(new, started_turn=data.turn_id)
        case TurnEnded():
            return msgspec.structs.replace(
                new,
                open_turns=tuple(t for t in new.open_turns if t != data.turn_id),
                started_turn=None
                if new.started_turn == data.turn_id
                else new.started_turn,
                # requests left open by a finished turn can no longer be answered
                pending_permissions=frozenset(),
                resolved_permissions=new.resolved_permissions | new.pending_permissions,
            )
        case PermissionRequested():
            return msgspec.structs.replace(
                new, pending_permissions=new.pending_permissions | {data.request_id}
            )
        case PermissionResolved():
            return msgspec.structs.replace(
                new,
                pending_permissions=new.pending_permissions - {data.request_id},
                resolved_permissions=new.resolved_permissions | {data.request_id},
            )
        case SandboxState():
            return msgspec.structs.replace(new, sandbox=data.state)
    return new


def fold(
    events: Iterable[Event], state: SessionSummary | None = None
) -> SessionSummary:
    """Fold events (in seq order) onto ``state``."""
    current = state or SessionSummary()
    for event in events:
        current = evolve(current, event)
    return current


def evolve_stored(state: SessionSummary, stored: StoredEvent) -> SessionSummary:
    """:func:`evolve` by a stored event; one that does not decode is a dead letter.

    It is skipped (counted and logged) and the summary moves past its seq, so
    a session stays readable whatever was published into its log.
    """
    try:
        event = stored.event()
    except EventDecodeError as exc:
        reason = f"seq {stored.seq} ({stored.type}) does not decode: {exc}"
        DEAD_LETTERS.note(LogDeadLetter(0, "", stored.seq, reason))
        return msgspec.structs.replace(state, last_seq=stored.seq)
    return evolve(state, event)
