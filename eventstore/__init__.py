"""The session log on JetStream, its SQLite projection, replay and audit."""

from eventstore.errors import (
    AppendFailedError,
    ChainBreakError,
    ConcurrencyError,
    EventStoreError,
    RangeUnavailableError,
)
from eventstore.log import Head, JetStreamLog, StoredEvent
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream, ensure_sessions_bucket

__all__ = [
    "AppendFailedError",
    "ChainBreakError",
    "ConcurrencyError",
    "EventStoreError",
    "EventStoreSettings",
    "Head",
    "JetStreamLog",
    "RangeUnavailableError",
    "StoredEvent",
    "ensure_log_stream",
    "ensure_sessions_bucket",
]
