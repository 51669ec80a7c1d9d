"""The reader's lean push consumer: ack-subject parsing, and a consumer that
vanishes server-side (no reconnect) being noticed by silence and re-created."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from nats.aio.client import Client

from eventstore import push
from eventstore.log import JetStreamLog
from eventstore.push import Restart, ack_seqs
from eventstore.reader import SEQ_HEADER, TYPE_HEADER
from eventstore.settings import EventStoreSettings
from schemas.events import AgentMessage
from tests.support.eventstore import open_log


def test_v1_and_v2_ack_subjects_give_stream_seq_consumer_seq_and_pending() -> None:
    v1 = "$JS.ACK.LOG.c1.1.120.7.1700000000000000000.3"
    v2 = "$JS.ACK.dom.acchash.LOG.c1.1.120.7.1700000000000000000.3.rnd"
    assert ack_seqs(v1) == (120, 7, 3)
    assert ack_seqs(v2) == (120, 7, 3)


def test_a_subject_that_is_no_delivery_is_refused_by_name() -> None:
    with pytest.raises(Restart, match="not a JetStream delivery"):
        ack_seqs("_INBOX.abc.def")


async def test_a_consumer_deleted_under_a_follower_is_re_created(
    nc: Client, settings: EventStoreSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(push, "HEARTBEAT_S", 0.2)  # silent after 0.6 s
    log = await open_log(nc, settings)
    await log.append("s_gone", AgentMessage(turn_id="t", text="1"), actor="w")
    seen: list[int] = []
    got = {1: asyncio.Event(), 2: asyncio.Event()}

    async def follow() -> None:
        async for stored in log.tail("s_gone"):
            seen.append(stored.seq)
            got[stored.seq].set()

    task = asyncio.create_task(follow())
    try:
        await asyncio.wait_for(got[1].wait(), 10)
        jsm = nc.jsm()
        stream = log.names.log_stream
        for info in await jsm.consumers_info(stream):
            await jsm.delete_consumer(stream, info.name)
        await log.append("s_gone", AgentMessage(turn_id="t", text="2"), actor="w")
        await asyncio.wait_for(got[2].wait(), 10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert seen == [1, 2]


async def test_a_closed_follower_leaves_no_watch_task(
    nc: Client, settings: EventStoreSettings
) -> None:
    log: JetStreamLog = await open_log(nc, settings)
    await log.append("s_w", AgentMessage(turn_id="t", text="1"), actor="w")
    assert [e.seq for e in await log.read("s_w", 0)] == [1]
    watch = log._replayer._watch
    assert watch._task is None


async def test_a_gap_after_events_that_arrived_together_ends_the_read_there(
    nc: Client, settings: EventStoreSettings
) -> None:
    """Seq 4 missing, 1-3 and 5 stored: the read answers 1-3 (every time) and
    does not restart from 0 for ever (events before the gap are handed on
    before the leg restarts, however they were batched)."""
    log = await open_log(nc, settings)
    for i in range(1, 6):
        await log.append("s_gap", AgentMessage(turn_id="t", text=str(i)), actor="w")
    raw = [e for e in await log.read("s_gap", 0) if e.seq != 4]
    for e in raw:
        await nc.jetstream().publish(
            log.names.log_subject("s_hole", e.seq, e.type),
            e.raw.replace(b"s_gap", b"s_hole"),
            headers={SEQ_HEADER: str(e.seq), TYPE_HEADER: e.type},
        )
    for _ in range(20):  # batching depends on timing: many tries
        got = await asyncio.wait_for(log.read("s_hole", 0), 10)
        assert [e.seq for e in got] == [1, 2, 3]
