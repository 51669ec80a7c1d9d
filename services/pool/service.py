"""``run(settings, stop)``: the pool process's resources and loops."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from eventstore.log import JetStreamLog
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.names import BusNames
from services.common.natsconn import nats_connection
from services.pool.bus import ensure_buckets, ensure_wake_consumer, ensure_wake_stream
from services.pool.lease import LeaseStore
from services.pool.metrics_http import serve_metrics
from services.pool.pool import WarmPool
from services.pool.settings import PoolSettings


async def ensure_log_exists(js: JetStreamContext, names: BusNames) -> None:
    """Create the log stream if missing; never change limits others configured."""
    try:
        await js.stream_info(names.log_stream)
    except NotFoundError:
        await ensure_log_stream(js, names, EventStoreSettings(bus_prefix=names.prefix))


async def run(
    settings: PoolSettings,
    stop: asyncio.Event | None = None,
    *,
    started: asyncio.Future[WarmPool] | None = None,
) -> None:
    """Run a pool until ``stop`` is set (forever without one)."""
    stop = stop or asyncio.Event()
    names = BusNames(settings.bus_prefix)
    async with contextlib.AsyncExitStack() as stack:
        await serve_metrics(settings, stack)
        nc = await stack.enter_async_context(
            nats_connection(
                settings.nats_url,
                "pool",
                user=settings.nats_user,
                password=settings.nats_password,
                stop=stop,
            )
        )
        js = nc.jetstream()
        await ensure_log_exists(js, names)
        await ensure_wake_stream(js, names)
        wake = await ensure_wake_consumer(js, names, settings.pool_wake_ack_wait_s)
        # Before the drain: a pull inbox holding an undelivered wake-up would stall
        # it (that wake-up is redelivered to another pool after its ack wait).
        stack.push_async_callback(wake.unsubscribe)
        leases, assignments = await ensure_buckets(js, names)
        pool = WarmPool(
            settings,
            js=js,
            log_=JetStreamLog(nc, names),
            leases=LeaseStore(leases, settings.pool_lease_ttl_s),
            assignments=assignments,
            wake=wake,
            host=socket.gethostname(),
        )
        if started is not None:
            started.set_result(pool)
        await pool.run(stop)
