"""Declare the log stream and the session index, idempotently, at start."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError
from nats.js.kv import KeyValue

from eventstore.settings import EventStoreSettings
from schemas.names import BusNames


def log_stream_config(names: BusNames, settings: EventStoreSettings) -> StreamConfig:
    """The session-log stream: limits retention (replayed by cursor), file storage."""
    return StreamConfig(
        name=names.log_stream,
        subjects=[names.log_all],
        retention=RetentionPolicy.LIMITS,
        discard=DiscardPolicy.OLD,
        storage=StorageType.FILE,
        max_age=settings.log_max_age_s or None,
        max_bytes=settings.log_max_bytes,
        max_msgs=settings.log_max_msgs,
        duplicate_window=settings.log_duplicate_window_s,
        num_replicas=settings.log_replicas,
        allow_direct=True,
    )


async def ensure_log_stream(
    js: JetStreamContext, names: BusNames, settings: EventStoreSettings
) -> None:
    """Create the log stream, or bring its limits in line with the settings."""
    config = log_stream_config(names, settings)
    try:
        await js.add_stream(config)
    except BadRequestError:
        # Exists with other limits: update in place (subjects and name are ours).
        await js.update_stream(config)


async def ensure_sessions_bucket(js: JetStreamContext, names: BusNames) -> KeyValue:
    """The KV bucket indexing sessions by device (services share only NATS)."""
    return await js.create_key_value(
        KeyValueConfig(
            bucket=names.sessions_bucket, history=1, storage=StorageType.FILE
        )
    )
