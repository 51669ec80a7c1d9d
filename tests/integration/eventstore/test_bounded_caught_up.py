"""A bounded read at the head answers from its locate: two exact gets, no more.

The summary cache checks every session it shows this way (a page of a listing
is 50 of them), so the caught-up case must not locate a second time.
"""

from __future__ import annotations

from nats.aio.client import Client

from eventstore.settings import EventStoreSettings
from tests.support.eventstore import append_script, open_log


async def test_a_caught_up_bounded_read_costs_two_gets(
    nc: Client, settings: EventStoreSettings
) -> None:
    log = await open_log(nc, settings)
    await append_script(log, "s_head", 20)
    before_out, before_in = nc.stats["out_msgs"], nc.stats["in_msgs"]
    assert await log.read("s_head", 20, 16) == []
    # event 21 (missing), event 20 (there): two requests, two answers
    assert nc.stats["out_msgs"] - before_out == 2
    assert nc.stats["in_msgs"] - before_in == 2
    await append_script(log, "s_head", 1)
    assert [e.seq for e in await log.read("s_head", 20, 16)] == [21]
