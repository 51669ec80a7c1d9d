"""The fold cache: incremental, and one consumer to the head when far behind."""

from __future__ import annotations

from eventstore.log import JetStreamLog
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.events import SessionCreated, TurnEnded, TurnStarted, UserPrompt
from schemas.names import BusNames
from services.gateway.summaries import SummaryCache


async def test_summary_folds_long_logs_and_then_only_new_events(nc, prefix):
    names = BusNames(prefix)
    await ensure_log_stream(
        nc.jetstream(), names, EventStoreSettings(bus_prefix=prefix)
    )
    log = JetStreamLog(nc, names)
    sid = "s_fold"
    await log.append(
        sid, SessionCreated(device_id="d", title="t"), actor="x", expected_seq=0
    )
    for i in range(17):  # 34 events: prompt + turn end each
        await log.append(sid, UserPrompt(text="p", turn_id=f"t{i}"), actor="x")
        await log.append(
            sid, TurnEnded(turn_id=f"t{i}", stop_reason="end_turn"), actor="x"
        )
    cache = SummaryCache(JetStreamLog(nc, names), size=2, page=10)
    summary = await cache.get(sid)
    assert (summary.last_seq, summary.status, summary.title) == (35, "idle", "t")
    await log.append(sid, UserPrompt(text="p", turn_id="t-last"), actor="x")
    await log.append(sid, TurnStarted(turn_id="t-last", prompt_seq=36), actor="x")
    summary = await cache.get(sid)
    assert (summary.last_seq, summary.status, summary.queued) == (37, "running", 0)


async def test_summary_cache_is_bounded(nc, prefix):
    names = BusNames(prefix)
    await ensure_log_stream(
        nc.jetstream(), names, EventStoreSettings(bus_prefix=prefix)
    )
    log = JetStreamLog(nc, names)
    cache = SummaryCache(log, size=2)
    for sid in ("s_a", "s_b", "s_c"):
        await log.append(sid, SessionCreated(device_id="d"), actor="x", expected_seq=0)
        assert (await cache.get(sid)).last_seq == 1
    assert len(cache) == 2


async def test_concurrent_lookups_of_one_session_agree_and_leave_no_locks(nc, prefix):
    import asyncio

    names = BusNames(prefix)
    await ensure_log_stream(
        nc.jetstream(), names, EventStoreSettings(bus_prefix=prefix)
    )
    log = JetStreamLog(nc, names)
    await log.append("s_many", SessionCreated(device_id="d"), actor="x", expected_seq=0)
    for i in range(30):
        await log.append("s_many", UserPrompt(text="p", turn_id=f"t{i}"), actor="x")
    cache = SummaryCache(log, page=8)
    summaries = await asyncio.gather(*(cache.get("s_many") for _ in range(10)))
    assert {(s.last_seq, s.queued) for s in summaries} == {(31, 30)}
    assert cache._locks == {}
