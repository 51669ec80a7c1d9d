"""The one append path under contention and retries: no gap, no repeat, ever."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.aio.client import Client

from eventstore.audit import verify
from eventstore.errors import ConcurrencyError
from eventstore.log import JetStreamLog
from eventstore.settings import EventStoreSettings
from schemas.events import AgentMessage, UserPrompt
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess
from tests.support.eventstore import append_script, dedupe_window_elapsed, open_log

WRITERS = 8
EACH = 200


async def test_eight_concurrent_writers_get_seqs_1_to_1600_exactly_once(
    nc: Client, nats_server: NatsServerProcess, settings: EventStoreSettings
) -> None:
    await open_log(nc, settings)
    names = BusNames(settings.bus_prefix)
    conns = [await nats.connect(nats_server.url) for _ in range(WRITERS)]
    try:

        async def writer(k: int) -> list[int]:
            log = JetStreamLog(conns[k], names)
            return [
                (
                    await log.append(
                        "s_race", AgentMessage(turn_id=f"w{k}", text=str(i)), actor="w"
                    )
                ).seq
                for i in range(EACH)
            ]

        seqs = await asyncio.gather(*(writer(k) for k in range(WRITERS)))
    finally:
        for c in conns:
            await c.close()
    got = sorted(s for per in seqs for s in per)
    assert got == list(range(1, WRITERS * EACH + 1))
    for per in seqs:
        assert per == sorted(per)  # each writer's own appends stay in its order
    stored = await JetStreamLog(nc, names).read("s_race")
    report = verify("s_race", stored, head=WRITERS * EACH)
    assert report.first_break is None, report.first_break
    texts = {(e.event().data.turn_id, e.event().data.text) for e in stored}
    assert len(texts) == WRITERS * EACH  # every append landed once


async def _lost_ack_retries(
    nc: Client, names: BusNames, session: str
) -> tuple[JetStreamLog, JetStreamLog]:
    """Two writers whose cached head predates the event about to land."""
    stale, fresh = JetStreamLog(nc, names), JetStreamLog(nc, names)
    await append_script(stale, session, 3)
    await stale.head(session)
    return stale, fresh


async def _assert_once(log: JetStreamLog, session: str, event_id: str, n: int) -> None:
    stored = await log.read(session)
    assert [e.seq for e in stored] == list(range(1, n + 1))
    assert [e.event().id for e in stored].count(event_id) == 1
    assert verify(session, stored).first_break is None


async def test_a_retried_append_inside_the_dedupe_window_is_stored_once(
    nc: Client, settings: EventStoreSettings
) -> None:
    original_log = await open_log(nc, settings)
    names = original_log.names
    stale, _ = await _lost_ack_retries(nc, names, "s_dup")
    prompt = UserPrompt(text="hi", turn_id="t1")
    original = await original_log.append("s_dup", prompt, actor="d", event_id="ev_x")
    # The writer whose ack was lost retries with its old head, and a new one
    # (another gateway) retries the whole request: both get the original back.
    again = await stale.append("s_dup", prompt, actor="d", event_id="ev_x")
    fresh = await JetStreamLog(nc, names).append(
        "s_dup", prompt, actor="d", event_id="ev_x"
    )
    assert again.raw == original.raw == fresh.raw
    await _assert_once(original_log, "s_dup", "ev_x", 4)


async def test_a_retried_append_after_the_dedupe_window_is_still_stored_once(
    nc: Client, settings: EventStoreSettings
) -> None:
    short = EventStoreSettings(
        nats_url=settings.nats_url,
        bus_prefix=settings.bus_prefix,
        log_duplicate_window_s=1.0,
    )
    original_log = await open_log(nc, short)
    names = original_log.names
    stale, _ = await _lost_ack_retries(nc, names, "s_late")
    prompt = UserPrompt(text="hi", turn_id="t1")
    original = await original_log.append("s_late", prompt, actor="d", event_id="ev_y")
    head_view = JetStreamLog(nc, names)
    await head_view.head("s_late")  # a new writer that sees ev_y as the head
    await dedupe_window_elapsed(nc, names, short.log_duplicate_window_s)
    again = await stale.append("s_late", prompt, actor="d", event_id="ev_y")
    fresh = await head_view.append("s_late", prompt, actor="d", event_id="ev_y")
    assert again.raw == original.raw == fresh.raw
    await _assert_once(original_log, "s_late", "ev_y", 4)


async def test_expected_seq_is_judged_against_the_log_not_a_stale_cached_head(
    nc: Client, settings: EventStoreSettings
) -> None:
    await open_log(nc, settings)
    names = BusNames(settings.bus_prefix)
    mine, other = JetStreamLog(nc, names), JetStreamLog(nc, names)
    await mine.append("s_exp", UserPrompt(text="a", turn_id="t1"), actor="x")
    await other.append("s_exp", UserPrompt(text="b", turn_id="t2"), actor="x")
    # `mine` still caches head 1; the log really is at 2, so expected 2 succeeds
    third = await mine.append(
        "s_exp", UserPrompt(text="c", turn_id="t3"), actor="x", expected_seq=2
    )
    assert third.seq == 3
    with pytest.raises(ConcurrencyError) as info:
        await other.append(
            "s_exp", UserPrompt(text="d", turn_id="t4"), actor="x", expected_seq=2
        )
    assert (info.value.expected, info.value.actual) == (2, 3)


async def test_a_writer_far_behind_finds_the_head_in_log_many_gets(
    nc: Client, settings: EventStoreSettings
) -> None:
    await open_log(nc, settings)
    names = BusNames(settings.bus_prefix)
    behind, busy = JetStreamLog(nc, names), JetStreamLog(nc, names)
    await behind.append("s_far", UserPrompt(text="a", turn_id="t1"), actor="g")
    for i in range(100):  # a turn's worth of events by another writer
        await busy.append("s_far", AgentMessage(turn_id="t1", text=str(i)), actor="w")
    gets: list[int] = []
    exact_get = behind._get_seq

    async def counted(session_id: str, seq: int) -> object:
        gets.append(seq)
        return await exact_get(session_id, seq)

    behind._get_seq = counted  # type: ignore[method-assign]
    stored = await behind.append("s_far", UserPrompt(text="b", turn_id="t2"), actor="g")
    assert stored.seq == 102
    # One step at a time took 101 gets; gallop + bisect: about 2 log2(100).
    assert len(gets) <= 16, gets
    await _assert_once(behind, "s_far", stored.event().id, 102)
