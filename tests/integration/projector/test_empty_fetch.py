"""nats-py 2.16 ``fetch`` can return ``[]``; the projector must take it as "nothing".

The server answers a lingering pull with a status (408 Request Timeout, or a
stale 404/408 meant for an earlier pull); nats-py then returns an empty list
instead of raising. Reproduced here by answering the projector's own pull
request with such a status, on the wire, as the server would.
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from nats.aio.msg import Msg

from eventstore.settings import EventStoreSettings
from schemas.names import BusNames
from tests.support.eventstore import (
    append_script,
    local_projector,
    open_log,
)


async def test_a_fetch_answered_by_a_status_alone_copies_nothing_and_goes_on(
    nc: Client, settings: EventStoreSettings
) -> None:
    names = BusNames(settings.bus_prefix)
    log = await open_log(nc, settings)
    answered = 0

    async def stale_status(msg: Msg) -> None:
        # What the server sends for an expired or superseded pull request.
        nonlocal answered
        answered += 1
        await nc.publish(
            msg.reply, b"", headers={"Status": "408", "Description": "Request Timeout"}
        )

    next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{names.log_stream}.projector"
    spy = await nc.subscribe(next_subject, cb=stale_status)
    async with local_projector(nc, settings) as local:
        # Both pulls of one fetch (probe, then lingering) get a status alone.
        assert await asyncio.wait_for(local.projector.step(wait_s=1.0), 5.0) == 0
        assert answered == 2
        await spy.unsubscribe()
        # and copying goes on afterwards
        await append_script(log, "s_after", 3)
        await local.sync()
        assert await local.projection.last_seq("s_after") == 3
