"""The pool and its workers outlive a nats-server restart (SIGKILL, same store)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import nats
import pytest

from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess
from tests.integration.pool.harness import Harness


@pytest.fixture
async def private(
    tmp_path: Path, prefix: str
) -> AsyncIterator[tuple[Harness, NatsServerProcess]]:
    server = NatsServerProcess(tmp_path / "nats")
    await server.astart()
    nc = await nats.connect(
        server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1
    )
    names = BusNames(prefix)
    await ensure_log_stream(nc.jetstream(), names, EventStoreSettings())
    try:
        async with AsyncExitStack() as stack:
            yield Harness(nc, names, server.url, stack, tmp_path), server
    finally:
        await nc.close()
        server.stop()


async def test_a_prompt_after_a_nats_restart_is_served_by_the_same_pool(
    private: tuple[Harness, NatsServerProcess],
) -> None:
    harness, server = private
    await harness.pool(pool_workers=2)
    sid = await harness.session()
    _, first = await harness.script(sid, {"say": "before"})
    await harness.ended(sid, first)
    server.kill()
    await server.astart()
    _, second = await harness.script(sid, {"say": "after"})
    assert (await harness.ended(sid, second, timeout=60)).data.stop_reason == "end_turn"
    other = await harness.session()
    _, third = await harness.script(other, {"say": "a new session too"})
    assert (
        await harness.ended(other, third, timeout=60)
    ).data.stop_reason == "end_turn"
