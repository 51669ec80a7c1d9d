"""``run``: the projector process — connect, declare, copy until stopped, drain."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack

from eventstore.index import SessionIndex
from eventstore.projection import SqliteProjection
from eventstore.projector import Projector
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.names import BusNames
from services.common.natsconn import nats_connection

log = logging.getLogger(__name__)


async def run(settings: EventStoreSettings, stop: asyncio.Event | None = None) -> None:
    """The projector process: copy until ``stop`` is set, then drain and exit."""
    stop = stop or asyncio.Event()
    names = BusNames(settings.bus_prefix)
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
        await ensure_log_stream(js, names, settings)
        index = await SessionIndex.open(js, names)
        projector = Projector(
            nc, projection, reads, names, batch=settings.projector_batch, index=index
        )
        stack.push_async_callback(projector.close)
        await projector.prepare()
        await nc.subscribe(names.projector_read, queue="projector", cb=projector.serve)
        log.info("projector copying %s into %s", names.log_stream, projection.path)
        await projector.consume(stop)
