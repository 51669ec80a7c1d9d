"""A worker's start-up outlasts a busy bus instead of exiting on the first timeout."""

from __future__ import annotations

import asyncio
import contextlib
import io

import msgspec
import nats.errors
import pytest
from nats.js.errors import BadRequestError, ServiceUnavailableError

from services.common.natsserver import NatsServerProcess
from services.pool import worker
from services.pool.ipc import WorkerConfig
from services.pool.settings import PoolSettings
from services.pool.worker import _patiently


async def test_timeouts_and_unavailability_are_waited_out() -> None:
    failures = [TimeoutError(), nats.errors.TimeoutError(), ServiceUnavailableError()]
    calls = 0

    async def declare() -> str:
        nonlocal calls
        calls += 1
        if failures:
            raise failures.pop(0)
        return "buckets"

    assert await _patiently("buckets", declare, delay=0.0) == "buckets"
    assert calls == 4


async def test_any_other_error_is_not_retried() -> None:
    calls = 0

    async def declare() -> str:
        nonlocal calls
        calls += 1
        raise BadRequestError(description="bucket config refused")

    with pytest.raises(BadRequestError, match="bucket config refused"):
        await _patiently("buckets", declare, delay=0.0)
    assert calls == 1


class _Exited(Exception):
    pass


async def test_a_worker_waiting_for_the_bus_exits_when_the_pool_goes(
    nats_server: NatsServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stdin's EOF is watched from before start-up: a worker still waiting for
    a busy bus (here: for ever) exits with the pool instead of being left."""
    never, exited = asyncio.Event(), asyncio.Event()
    codes: list[int] = []

    async def busy_bus(*_: object) -> None:
        await never.wait()

    def exit_now(code: int) -> None:  # os._exit, minus ending pytest
        codes.append(code)
        exited.set()

    monkeypatch.setattr(worker, "ensure_buckets", busy_bus)
    monkeypatch.setattr(worker.os, "_exit", exit_now)
    settings = msgspec.convert({"nats_url": nats_server.url}, PoolSettings)
    config = WorkerConfig(worker_id="w_test", host="h", settings=settings)
    stdin = asyncio.StreamReader()
    started = asyncio.create_task(worker.run_worker(config, stdin, io.BytesIO()))
    stdin.feed_eof()  # the pool is gone
    try:
        await asyncio.wait_for(exited.wait(), 10)
        assert not started.done()  # still waiting for the bus when it exited
    finally:
        started.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await started
    assert codes == [0]


async def test_lines_reach_the_worker_until_eof(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def exit_now(code: int) -> None:
        raise _Exited(code)

    monkeypatch.setattr(worker.os, "_exit", exit_now)
    stdin, lines = asyncio.StreamReader(), asyncio.Queue[bytes]()
    stdin.feed_data(b'{"type":"stop"}\n{"type":"yield"}\n')
    stdin.feed_eof()
    with pytest.raises(_Exited):
        await worker.watch_the_pool(stdin, lines)
    assert [lines.get_nowait(), lines.get_nowait()] == [
        b'{"type":"stop"}\n',
        b'{"type":"yield"}\n',
    ]
