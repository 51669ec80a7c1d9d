"""Tool calls across a sandbox-host restart: retried, not failed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.events import ToolCall, ToolResult, TurnEnded
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess
from tests.e2e.pool.conftest import BrokerProcess, broker_ready, kill_sandboxes
from tests.integration.pool.harness import Harness


@pytest.fixture
async def private(
    nc: Client,
    prefix: str,
    nats_server: NatsServerProcess,
    sandboxhost_factory: Any,
    tmp_path: Path,
) -> AsyncIterator[tuple[Harness, Any]]:
    """A broker process on a private sandbox host the test may restart."""
    host = sandboxhost_factory()
    names = BusNames(prefix)
    await ensure_log_stream(nc.jetstream(), names, EventStoreSettings())
    broker = BrokerProcess(nats_server.url, prefix, host, tmp_path / "broker.log")
    await broker_ready(nc, names)
    try:
        async with AsyncExitStack() as stack:
            yield Harness(nc, names, nats_server.url, stack, tmp_path), host
    finally:
        broker.stop()
        if host.pid is None:
            host.start()
        await kill_sandboxes(host, prefix)


async def test_a_tool_call_across_a_sandbox_host_restart_succeeds(
    private: tuple[Harness, Any],
) -> None:
    harness, host = private
    await harness.pool(pool_tool_retry_window_s=20)
    sid = await harness.session()
    write = {"tool": "write", "args": {"path": "kept.txt", "content": "kept"}}
    _, first = await harness.script(sid, write)
    await harness.ended(sid, first, timeout=60)
    # SIGTERM: the host goes away (waited for), its sandboxes' files stay.
    await asyncio.to_thread(host.stop)
    seq, second = await harness.script(
        sid, {"tool": "read", "args": {"path": "kept.txt"}}, {"say": "read it"}
    )
    # Restart once the read is under way (it is being retried by then).
    await harness.wait_for(sid, lambda e: isinstance(e.data, ToolCall), after=seq)
    await asyncio.to_thread(host.start)
    ended = await harness.ended(sid, second, timeout=60)
    results = [
        e.data for e in await harness.events(sid) if isinstance(e.data, ToolResult)
    ]
    assert results[-1].ok, results[-1].error
    assert "kept" in results[-1].output
    assert isinstance(ended.data, TurnEnded)
    assert not ended.data.infrastructure_degraded
