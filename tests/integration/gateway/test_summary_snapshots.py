"""Summary snapshots: a cold lookup starts from a snapshot the log agrees with."""

from __future__ import annotations

import msgspec
import pytest

from eventstore.log import JetStreamLog
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.events import SessionCreated, TurnEnded, UserPrompt
from schemas.names import BusNames
from services.gateway.snapshots import SummarySnapshot, SummarySnapshots
from services.gateway.summaries import SummaryCache


@pytest.fixture
async def log(nc, prefix) -> JetStreamLog:
    names = BusNames(prefix)
    await ensure_log_stream(
        nc.jetstream(), names, EventStoreSettings(bus_prefix=prefix)
    )
    return JetStreamLog(nc, names)


async def write(log: JetStreamLog, sid: str, turns: int, start: int = 0) -> None:
    if start == 0:
        await log.append(
            sid, SessionCreated(device_id="d", title="real"), actor="x", expected_seq=0
        )
    for i in range(start, start + turns):
        await log.append(sid, UserPrompt(text="p", turn_id=f"t{i}"), actor="x")
        await log.append(
            sid, TurnEnded(turn_id=f"t{i}", stop_reason="end_turn"), actor="x"
        )


async def cold_cache(
    nc, prefix, every: int = 10
) -> tuple[SummaryCache, SummarySnapshots]:
    names = BusNames(prefix)
    jlog = JetStreamLog(nc, names)
    snaps = await SummarySnapshots.open(nc.jetstream(), names, jlog, every)
    return SummaryCache(jlog, snapshots=snaps), snaps


async def stored(nc, prefix, sid: str) -> SummarySnapshot:
    kv = await nc.jetstream().key_value(BusNames(prefix).summaries_bucket)
    return msgspec.json.decode((await kv.get(sid)).value, type=SummarySnapshot)


async def retitle(nc, prefix, sid: str, title: str, digest: str | None = None) -> None:
    """Rewrite the stored snapshot's title (and digest): to see which is used."""
    snap = await stored(nc, prefix, sid)
    summary = msgspec.structs.replace(snap.summary, title=title)
    value = SummarySnapshot(summary=summary, digest=digest or snap.digest)
    kv = await nc.jetstream().key_value(BusNames(prefix).summaries_bucket)
    await kv.put(sid, msgspec.json.encode(value))


async def test_a_long_fold_stores_a_snapshot_and_a_cold_cache_starts_from_it(
    nc, prefix, log
):
    await write(log, "s_snap", 12)  # 25 events
    first, _ = await cold_cache(nc, prefix)
    assert (await first.get("s_snap")).last_seq == 25
    assert (await stored(nc, prefix, "s_snap")).summary.last_seq == 25
    # The snapshot's title differs from the log's: seeing it proves the cold
    # lookup started from the snapshot and did not fold the log from seq 1.
    await retitle(nc, prefix, "s_snap", "from-snapshot")
    await write(log, "s_snap", 1, start=12)
    second, _ = await cold_cache(nc, prefix)
    summary = await second.get("s_snap")
    assert (summary.title, summary.last_seq, summary.status) == (
        "from-snapshot",
        27,
        "idle",
    )


async def test_the_snapshot_moves_on_every_n_events_of_incremental_folds(
    nc, prefix, log
):
    await write(log, "s_move", 6)  # 13 events
    cache, _ = await cold_cache(nc, prefix)
    assert (await cache.get("s_move")).last_seq == 13
    assert (await stored(nc, prefix, "s_move")).summary.last_seq == 13
    for i in range(6, 10):  # 8 more: under `every` since the snapshot
        await write(log, "s_move", 1, start=i)
        await cache.get("s_move")
    assert (await stored(nc, prefix, "s_move")).summary.last_seq == 13
    await write(log, "s_move", 1, start=10)
    assert (await cache.get("s_move")).last_seq == 23
    assert (await stored(nc, prefix, "s_move")).summary.last_seq == 23


async def test_a_snapshot_the_log_disagrees_with_is_ignored(nc, prefix, log):
    await write(log, "s_stale", 10)  # 21 events: past the short-log path
    first, _ = await cold_cache(nc, prefix)
    await first.get("s_stale")
    await retitle(nc, prefix, "s_stale", "forged", digest="0" * 32)
    second, _ = await cold_cache(nc, prefix)
    summary = await second.get("s_stale")
    assert (summary.title, summary.last_seq) == ("real", 21)


async def test_undecodable_and_too_far_snapshots_are_ignored(nc, prefix, log):
    await write(log, "s_bad", 1)
    _, snaps = await cold_cache(nc, prefix)
    kv = await nc.jetstream().key_value(BusNames(prefix).summaries_bucket)
    await kv.put("s_bad", b"{not json")
    assert await snaps.load("s_bad") is None
    ahead = msgspec.json.encode(
        {"summary": {"last_seq": 99, "title": "ahead"}, "digest": "x"}
    )
    await kv.put("s_bad", ahead)
    assert await snaps.load("s_bad") is None
    cache, _ = await cold_cache(nc, prefix)
    summary = await cache.get("s_bad")
    assert (summary.title, summary.last_seq) == ("real", 3)
