"""One batched request tells which cached summaries are still current."""

from __future__ import annotations

from eventstore.log import JetStreamLog
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.events import SessionCreated, UserPrompt
from schemas.names import BusNames
from services.gateway.heads import current
from services.gateway.summaries import SummaryCache


async def opened(nc, prefix) -> JetStreamLog:
    names = BusNames(prefix)
    await ensure_log_stream(
        nc.jetstream(), names, EventStoreSettings(bus_prefix=prefix)
    )
    return JetStreamLog(nc, names)


async def created(log: JetStreamLog, sid: str, prompts: int = 0) -> None:
    await log.append(sid, SessionCreated(device_id="d"), actor="x", expected_seq=0)
    for i in range(prompts):
        await log.append(sid, UserPrompt(text="p", turn_id=f"t{i}"), actor="x")


async def test_current_names_exactly_the_sessions_at_their_cached_head(nc, prefix):
    log = await opened(nc, prefix)
    for sid, prompts in (("s_same", 2), ("s_moved", 2), ("s_short", 0)):
        await created(log, sid, prompts)
    await log.append("s_moved", UserPrompt(text="p", turn_id="late"), actor="x")
    last = {
        "s_same": 3,  # the head
        "s_moved": 3,  # one event behind
        "s_short": 2,  # ahead of the log (re-created stream): not current
        "s_none": 1,  # no such session
        "s_zero": 0,  # nothing folded yet
    }
    assert await current(nc, log.names, last, 2.0) == {"s_same"}
    # A dead letter in the next seq's place counts as "the log moved".
    await nc.jetstream().publish(log.names.log_subject("s_same", 4, "x.y"), b"junk")
    assert await current(nc, log.names, last, 2.0) == set()


async def test_many_serves_current_entries_and_folds_the_rest(nc, prefix):
    log = await opened(nc, prefix)
    for sid in ("s_a", "s_b", "s_c"):
        await created(log, sid, 1)
    cache = SummaryCache(log, nc=nc)
    assert [s.last_seq for s in await cache.many(["s_a", "s_b"])] == [2, 2]
    await log.append("s_b", UserPrompt(text="p", turn_id="more"), actor="x")
    before = nc.stats["out_msgs"]
    got = await cache.many(["s_a", "s_b", "s_c"])
    assert [(s.last_seq, s.queued) for s in got] == [(2, 1), (3, 2), (2, 1)]
    # s_a: confirmed by the one batched request (no gets of its own)
    sent = nc.stats["out_msgs"] - before
    one_by_one = SummaryCache(log)
    await one_by_one.many(["s_a", "s_b", "s_c"])
    await log.append("s_b", UserPrompt(text="p", turn_id="again"), actor="x")
    before = nc.stats["out_msgs"]
    await one_by_one.many(["s_a", "s_b", "s_c"])
    assert sent < nc.stats["out_msgs"] - before
