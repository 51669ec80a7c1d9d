"""``run``: the projector process — connect, declare, copy while holding the lease.

Every replica answers range reads from its SQLite file; one at a time (the
holder of the copier lease, ``lease.py``) runs the consumer that copies. The
projector only reads the log stream: the writers (gateway, pool, broker)
declare it, and its NATS user may not create or update it (``natsconf.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from contextlib import AsyncExitStack

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from eventstore.index import SessionIndex
from eventstore.projection import SqliteProjection
from eventstore.projector import Projector
from eventstore.settings import EventStoreSettings
from schemas.names import BusNames
from services.common.natsconn import nats_connection
from services.projector.lease import CopierLease, lease_bucket

log = logging.getLogger(__name__)


async def run(
    settings: EventStoreSettings,
    stop: asyncio.Event | None = None,
    *,
    replica: str | None = None,
) -> None:
    """The projector process: copy (when the copier) until ``stop``, then drain."""
    stop = stop or asyncio.Event()
    names = BusNames(settings.bus_prefix)
    replica = replica or f"{socket.gethostname()}:{os.getpid()}"
    async with AsyncExitStack() as stack:
        projection = await SqliteProjection.open(settings.projector_db)
        stack.push_async_callback(projection.close)
        reads = await SqliteProjection.open(settings.projector_db, readonly=True)
        stack.push_async_callback(reads.close)
        nc = await stack.enter_async_context(
            nats_connection(
                settings.nats_url,
                "projector",
                user=settings.nats_user,
                password=settings.nats_password,
                stop=stop,
            )
        )
        js = nc.jetstream()
        index = await SessionIndex.open(js, names)
        projector = Projector(
            nc, projection, reads, names, batch=settings.projector_batch, index=index
        )
        stack.push_async_callback(projector.close)
        await nc.subscribe(names.projector_read, queue="projector", cb=projector.serve)
        kv = await lease_bucket(js, names, settings.projector_lease_s)
        lease = CopierLease(kv, replica, settings.projector_lease_s)
        stack.push_async_callback(lease.release)
        if not await await_stream(js, names.log_stream, stop):
            return
        while await lease.acquire(stop):
            await projector.prepare()
            log.info("projector copying %s into %s", names.log_stream, projection.path)
            await _copy_while_held(projector, lease, stop)
            await projector.close()


async def await_stream(
    js: JetStreamContext, stream: str, stop: asyncio.Event, every_s: float = 0.5
) -> bool:
    """Wait until ``stream`` exists (True), or ``stop`` (False); never declares it."""
    while not stop.is_set():
        try:
            await js.stream_info(stream)
        except NotFoundError:
            log.info("waiting for a writer to declare %s", stream)
        else:
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every_s):
                await stop.wait()
    return False


async def _copy_while_held(
    projector: Projector, lease: CopierLease, stop: asyncio.Event
) -> None:
    """Copy until ``stop`` or until the lease is lost (then stop copying first)."""
    lost = asyncio.Event()
    halt = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(projector.consume(halt))
        await lease.keep(lost, stop)  # returns on stop, or once the lease is lost
        halt.set()
