"""The notifier process: the log consumer (router) and the outbox consumer (deliverer).

Both are durable pull consumers shared by every replica, so any number of
notifiers split the work and a restarted one resumes where the durable stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import aiohttp
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from eventstore.index import SessionIndex
from eventstore.streams import ensure_stream
from schemas.names import BusNames
from schemas.webhooks import PUSHABLE
from services.common.addresses import PublicOnlyResolver
from services.common.natsconn import nats_connection
from services.common.webhooks import open_webhooks
from services.notifier.deliver import Deliverer
from services.notifier.router import Router
from services.notifier.settings import NotifierSettings

log = logging.getLogger("services.notifier")
FETCH_S = 1.0
# How long a busy fetch waits to fill its batch.
BUSY_LINGER_S = 0.02
ROUTE_BATCH = 256
RETRY_S = 0.5
DRAIN_S = 2.0

Handler = Callable[[Msg], Awaitable[None]]


async def run(settings: NotifierSettings, stop: asyncio.Event) -> None:
    """Route and deliver until ``stop`` is set."""
    async with nats_connection(
        settings.nats_url,
        "notifier",
        user=settings.nats_user,
        password=settings.nats_password,
        stop=stop,
        drain_s=DRAIN_S,
    ) as nc:
        await serve(nc.jetstream(), BusNames(settings.bus_prefix), settings, stop)
    log.info("notifier stopped")


async def serve(
    js: JetStreamContext,
    names: BusNames,
    settings: NotifierSettings,
    stop: asyncio.Event,
) -> None:
    """Declare the outbox, join both durable consumers, work until ``stop``."""
    if not await _wait_for_log(js, names, stop):
        return
    await ensure_outbox(js, names, settings)
    index = await SessionIndex.open(js, names)
    store = await open_webhooks(js, names)
    router = Router(js, names, index, store)
    log_sub = await join_log(js, names)
    out_sub = await js.pull_subscribe(
        names.webhook_all,
        durable=names.notifier_durable,
        stream=names.webhook_stream,
        config=_outbox_consumer(names, settings),
    )
    resolver = None if settings.webhook_allow_private else PublicOnlyResolver()
    connector = aiohttp.TCPConnector(
        limit=settings.notifier_concurrency, resolver=resolver
    )
    async with aiohttp.ClientSession(connector=connector) as http:
        deliverer = Deliverer(store, settings, http)
        log.info("notifier running (prefix %s)", names.prefix)
        width = settings.notifier_concurrency
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(route(log_sub, router.handle, stop))
                tasks.create_task(deliver(out_sub, deliverer.handle, stop, width))
        finally:
            # A pull subscription never drains (its fetch queue is never joined):
            # left to drain, it holds the close for the whole bound and logs a
            # cancelled gather. Nothing unacked is lost: JetStream re-offers it.
            for sub in (log_sub, out_sub):
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()


async def join_log(
    js: JetStreamContext, names: BusNames
) -> JetStreamContext.PullSubscription:
    """The routers' shared durable on the log, created or brought to today's
    filter (nats.py's ``pull_subscribe`` would bind an older one as it is)."""
    await js.add_consumer(names.log_stream, _log_consumer(names))
    return await js.pull_subscribe_bind(
        durable=names.notifier_durable, stream=names.log_stream
    )


async def ensure_outbox(
    js: JetStreamContext, names: BusNames, settings: NotifierSettings
) -> None:
    """The outbox stream: a work queue (a job is gone once delivered or given up)."""
    config = StreamConfig(
        name=names.webhook_stream,
        subjects=[names.webhook_all],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        max_age=settings.notifier_outbox_max_age_s or None,
        duplicate_window=120.0,
    )
    await ensure_stream(js, config)


def _log_consumer(names: BusNames) -> ConsumerConfig:
    # First start: from now on (a new notifier does not push history). Only the
    # types a device can ask for are delivered: deltas, tool calls and the like
    # (most of a turn's events) never leave the server.
    return ConsumerConfig(
        name=names.notifier_durable,
        durable_name=names.notifier_durable,
        deliver_policy=DeliverPolicy.NEW,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=30.0,
        max_ack_pending=4 * ROUTE_BATCH,
        filter_subjects=[names.log_type(kind) for kind in sorted(PUSHABLE)],
    )


def _outbox_consumer(names: BusNames, settings: NotifierSettings) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=names.notifier_durable,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        # An attempt must be answered (or given up) before JetStream re-offers it.
        ack_wait=settings.webhook_timeout_s + 5.0,
        max_ack_pending=10_000,
        filter_subject=names.webhook_all,
    )


async def route(
    sub: JetStreamContext.PullSubscription, handle: Handler, stop: asyncio.Event
) -> None:
    """Handle log messages one at a time, in order, in batches."""
    fetch = Fetcher(sub)
    while not stop.is_set():
        for msg in await fetch(ROUTE_BATCH):
            try:
                await handle(msg)
            except (nats.errors.Error, TimeoutError) as exc:
                # Not acked: JetStream re-offers it after ack_wait.
                log.warning("routing %s failed: %r", msg.subject, exc)


async def deliver(
    sub: JetStreamContext.PullSubscription,
    handle: Handler,
    stop: asyncio.Event,
    concurrency: int,
) -> None:
    """Run up to ``concurrency`` deliveries at once; a slow one holds only itself."""
    running: set[asyncio.Task[None]] = set()
    fetch = Fetcher(sub)
    try:
        while not stop.is_set():
            if len(running) >= concurrency:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                continue
            for msg in await fetch(concurrency - len(running)):
                task = asyncio.create_task(_guarded(handle, msg))
                running.add(task)
                task.add_done_callback(running.discard)
    finally:
        for task in running:
            task.cancel()  # unacked: redelivered to a live replica
        await asyncio.gather(*running, return_exceptions=True)


async def _guarded(handle: Handler, msg: Msg) -> None:
    try:
        await handle(msg)
    except (nats.errors.Error, TimeoutError) as exc:
        log.warning("delivery bookkeeping failed (redelivered later): %r", exc)


class Fetcher:
    """Pull without the batch-wait latency of a lingering ``fetch(n)``.

    nats-py's ``fetch(n)`` first takes what is available at once, but when
    nothing is, it lingers until ``n`` messages arrived or the timeout passed —
    one event on a quiet log would wait the whole timeout. So: idle, wait for
    *one* message (returns as it arrives); busy, take up to ``n`` with a short
    linger; a short batch means idle again.
    """

    def __init__(self, sub: JetStreamContext.PullSubscription) -> None:
        self._sub = sub
        self._idle = True

    async def __call__(self, batch: int) -> list[Msg]:
        want = 1 if self._idle else batch
        timeout = FETCH_S if want == 1 else BUSY_LINGER_S
        try:
            msgs = await self._sub.fetch(want, timeout=timeout)
        except (nats.errors.TimeoutError, TimeoutError):
            msgs = []  # nats-py raises either, by where it timed out
        except nats.errors.Error as exc:
            log.warning("fetch failed: %r", exc)
            await asyncio.sleep(RETRY_S)
            msgs = []
        self._idle = len(msgs) < want or batch == 1
        return msgs


async def _wait_for_log(
    js: JetStreamContext, names: BusNames, stop: asyncio.Event
) -> bool:
    """Wait until the gateway has declared the log stream (the notifier never does)."""
    while not stop.is_set():
        try:
            await js.stream_info(names.log_stream)
            return True
        except NotFoundError:
            log.info("waiting for the log stream %s", names.log_stream)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("stream_info failed: %r", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RETRY_S)
    return False
