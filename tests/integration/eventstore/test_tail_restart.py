"""``tail`` across a nats-server SIGKILL and restart: nothing missing, nothing twice."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from eventstore.log import JetStreamLog
from eventstore.settings import EventStoreSettings
from schemas.events import AgentMessage
from services.common.natsserver import NatsServerProcess
from tests.support.eventstore import open_log

TOTAL = 150


@pytest.fixture
async def own_server(tmp_path: Path) -> AsyncIterator[NatsServerProcess]:
    """A nats-server of this test alone (it gets killed)."""
    server = NatsServerProcess(tmp_path / "nats")
    await server.astart()
    yield server
    server.stop()


async def _client(url: str) -> Client:
    return await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.05)


async def test_tail_survives_a_server_kill_with_no_gap_and_no_repeat(
    own_server: NatsServerProcess,
) -> None:
    writer_nc, reader_nc = await _client(own_server.url), await _client(own_server.url)
    settings = EventStoreSettings(nats_url=own_server.url, bus_prefix="kill")
    writer = await open_log(writer_nc, settings)
    reader = JetStreamLog(reader_nc, writer.names)
    seen: list[int] = []
    halfway, done = asyncio.Event(), asyncio.Event()

    async def follow() -> None:
        async for stored in reader.tail("s_live"):
            seen.append(stored.seq)
            if stored.seq == TOTAL // 3:
                halfway.set()
            if stored.seq == TOTAL:
                done.set()

    async def write() -> None:
        for i in range(TOTAL):
            await writer.append(
                "s_live", AgentMessage(turn_id="t", text=str(i)), actor="w"
            )

    tail = asyncio.create_task(follow())
    appends = asyncio.create_task(write())
    try:
        await asyncio.wait_for(halfway.wait(), 20)
        own_server.kill()
        await own_server.astart()
        restarted = time.monotonic()
        await asyncio.wait_for(appends, 30)
        # Well under the ~20 s nats.py's ordered consumer alone would stall for.
        await asyncio.wait_for(done.wait(), 8)
        assert time.monotonic() - restarted < 8
    finally:
        for task in (tail, appends):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await writer_nc.close()
        await reader_nc.close()
    assert seen == list(range(1, TOTAL + 1))
