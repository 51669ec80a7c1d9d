"""Declare streams, KV buckets and object stores at the configured replica count.

Every declaration site of every service goes through these helpers, so the one
setting ``AGENTBUS_JS_REPLICAS`` applies everywhere, and declaring an existing
stream or bucket brings its replica count to the setting (JetStream moves the
data to the new peers itself).
"""

from __future__ import annotations

import dataclasses

from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    KeyValueConfig,
    ObjectStoreConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)
from nats.js.errors import BadRequestError, BucketNotFoundError, NotFoundError
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from eventstore.settings import EventStoreSettings, js_replicas
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
        allow_direct=True,
    )


async def ensure_stream(
    js: JetStreamContext, config: StreamConfig, replicas: int | None = None
) -> StreamInfo:
    """Create ``config`` at the replica count, or update the existing stream to it."""
    config = dataclasses.replace(config, num_replicas=replicas or js_replicas())
    try:
        return await js.add_stream(config)
    except BadRequestError:
        # Exists with other limits or replicas: update in place (name is ours).
        return await js.update_stream(config)


async def ensure_log_stream(
    js: JetStreamContext, names: BusNames, settings: EventStoreSettings
) -> None:
    """Create the log stream, or bring its limits in line with the settings."""
    await ensure_stream(js, log_stream_config(names, settings))


async def ensure_kv(
    js: JetStreamContext, config: KeyValueConfig, replicas: int | None = None
) -> KeyValue:
    """Open the bucket (other settings kept) at the replica count, else create it."""
    wanted = replicas or js_replicas()
    try:
        kv = await js.key_value(config.bucket)
    except BucketNotFoundError:
        try:
            return await js.create_key_value(
                dataclasses.replace(config, replicas=wanted)
            )
        except BadRequestError:
            # Another replica created it first, with other settings: use that one.
            kv = await js.key_value(config.bucket)
    await set_replicas(js, f"KV_{config.bucket}", wanted)
    return kv


async def ensure_object_store(
    js: JetStreamContext, config: ObjectStoreConfig, replicas: int | None = None
) -> ObjectStore:
    """Open the object store at the replica count, else create it."""
    wanted = replicas or js_replicas()
    assert config.bucket is not None, "an object store needs a bucket name"
    try:
        obj = await js.object_store(config.bucket)
    except NotFoundError:
        return await js.create_object_store(
            config.bucket, dataclasses.replace(config, replicas=wanted)
        )
    await set_replicas(js, f"OBJ_{config.bucket}", wanted)
    return obj


async def set_replicas(js: JetStreamContext, stream: str, replicas: int) -> None:
    """Update ``stream`` to ``replicas`` if it has another count (else no-op)."""
    info = await js.stream_info(stream)
    if (info.config.num_replicas or 1) == replicas:
        return
    await js.update_stream(dataclasses.replace(info.config, num_replicas=replicas))


async def ensure_sessions_bucket(js: JetStreamContext, names: BusNames) -> KeyValue:
    """The KV bucket indexing sessions by device (services share only NATS)."""
    return await ensure_kv(
        js,
        KeyValueConfig(
            bucket=names.sessions_bucket, history=1, storage=StorageType.FILE
        ),
    )
