"""Streams, consumers and buckets of the pool, declared idempotently at start.

Durable wake-ups: the ``<PREFIX>_WAKE`` work-queue stream *sources* every
``user.prompt``, ``permission.resolved`` and ``turn.cancel_requested`` from the
log stream (server-side copies filtered by subject), so the gateway only appends
and nothing can be lost between the append and the wake-up; a prompt made while
no pool runs waits there, and an answer (or a cancel) wakes a turn that was
parked waiting for a person. The stream also
takes ``<prefix>.wake.<session>`` messages that pools and workers publish to
re-wake a session (after a crash or a release that raced a prompt). One durable
pull consumer is shared by every pool: a pool pulls a wake-up only when it has
an idle worker, so several pools share the load and extra sessions wait.
"""

from __future__ import annotations

import contextlib

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamSource,
)
from nats.js.errors import BadRequestError
from nats.js.kv import KeyValue

from eventstore.streams import ensure_kv, ensure_stream
from schemas.events import PermissionResolved, TurnCancelRequested, UserPrompt
from schemas.names import BusNames

WAKE_DURABLE = "pool"
# Events that give a session work: a prompt, an answer a parked turn awaits, or
# a cancel of a parked turn (no worker follows the session while it waits for a
# person, so without this wake-up the turn would stay open until answered).
WAKE_TYPES = (UserPrompt.TYPE, PermissionResolved.TYPE, TurnCancelRequested.TYPE)


def wake_stream_config(names: BusNames) -> StreamConfig:
    """Work-queue stream: prompts sourced from the log, plus explicit re-wakes."""
    return StreamConfig(
        name=names.wake_stream,
        subjects=[names.wake_all],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        duplicate_window=120.0,
        sources=[
            StreamSource(name=names.log_stream, filter_subject=names.log_type(kind))
            for kind in WAKE_TYPES
        ],
    )


async def ensure_wake_stream(js: JetStreamContext, names: BusNames) -> None:
    """Create the wake-up stream and its shared durable pull consumer."""
    await ensure_stream(js, wake_stream_config(names))


async def ensure_wake_consumer(
    js: JetStreamContext, names: BusNames, ack_wait_s: float
) -> JetStreamContext.PullSubscription:
    """The durable consumer every pool pulls wake-ups from."""
    config = ConsumerConfig(
        durable_name=WAKE_DURABLE,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ack_wait_s,
        max_deliver=-1,
        max_ack_pending=-1,
    )
    # Another pool may have declared it with other settings: share that one.
    with contextlib.suppress(BadRequestError):
        await js.add_consumer(names.wake_stream, config)
    return await js.pull_subscribe_bind(WAKE_DURABLE, stream=names.wake_stream)


async def ensure_buckets(
    js: JetStreamContext, names: BusNames
) -> tuple[KeyValue, KeyValue]:
    """The leases bucket and the assignments bucket (history 1, file storage)."""
    return (
        await _bucket(js, names.leases_bucket),
        await _bucket(js, names.assignments_bucket),
    )


async def _bucket(js: JetStreamContext, name: str) -> KeyValue:
    # The broker declares the assignments bucket too: open before creating.
    return await ensure_kv(
        js, KeyValueConfig(bucket=name, history=1, storage=StorageType.FILE)
    )


async def rewake(
    js: JetStreamContext, names: BusNames, session_id: str, key: str
) -> int:
    """Queue a wake-up for a session (``key`` dedupes racing re-wakes); its seq."""
    ack = await js.publish(
        names.wake_subject(session_id), b"", headers={"Nats-Msg-Id": key}
    )
    return ack.seq
