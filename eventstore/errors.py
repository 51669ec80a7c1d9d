"""Errors of the event store; drivers' errors are translated at one boundary."""

from __future__ import annotations


class EventStoreError(Exception):
    """Base of every event-store error."""


class ConcurrencyError(EventStoreError):
    """An append asked for an exact expected seq and another writer got there first."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session_id}: expected last seq {expected}, log is at {actual}"
        )


class RangeUnavailableError(EventStoreError):
    """Neither JetStream nor the projector holds the events after ``after``."""

    def __init__(
        self, session_id: str, after: int, first_available: int, last: int, reason: str
    ) -> None:
        self.session_id = session_id
        self.after = after
        self.first_available = first_available
        self.last = last
        self.reason = reason
        super().__init__(
            f"session {session_id}: cannot serve events after {after} ({reason}); "
            f"available {first_available}..{last}"
        )


class AppendFailedError(EventStoreError):
    """An append could not be confirmed before its deadline (NATS unreachable)."""

    def __init__(self, session_id: str, event_id: str, cause: str) -> None:
        self.session_id = session_id
        self.event_id = event_id
        super().__init__(f"session {session_id}: append of {event_id} failed: {cause}")


class ChainBreakError(EventStoreError):
    """A log is not contiguous or its hash chain does not verify."""

    def __init__(self, session_id: str, seq: int, problem: str) -> None:
        self.session_id = session_id
        self.seq = seq
        self.problem = problem
        super().__init__(f"session {session_id}: break at seq {seq}: {problem}")
