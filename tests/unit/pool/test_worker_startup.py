"""A worker's start-up: a bus too busy to answer ends it cleanly (the pool starts
another), and a pool that goes away ends it even before it is ready."""

from __future__ import annotations

import asyncio
import contextlib
import io

import msgspec
import nats.errors
import pytest
from nats.js.errors import ServiceUnavailableError

from services.common.natsserver import NatsServerProcess
from services.pool import worker
from services.pool.ipc import WorkerConfig
from services.pool.settings import PoolSettings


@pytest.mark.parametrize(
    "busy",
    [TimeoutError(), nats.errors.TimeoutError(), ServiceUnavailableError()],
)
async def test_a_bus_too_busy_to_answer_ends_the_worker_in_one_line(
    busy: Exception,
    nats_server: NatsServerProcess,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No traceback: the pool sees the exit and starts another worker."""

    async def busy_bus(*_: object) -> None:
        raise busy

    class Exited(Exception):
        pass

    def exit_now(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(worker, "ensure_buckets", busy_bus)
    monkeypatch.setattr(worker.os, "_exit", exit_now)
    with pytest.raises(Exited, match=str(worker.EXIT_START_FAILED)):
        await worker.run_worker(
            _config(nats_server), asyncio.StreamReader(), io.BytesIO()
        )
    assert "start-up: the bus did not answer" in caplog.text


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
    stdin = asyncio.StreamReader()
    started = asyncio.create_task(
        worker.run_worker(_config(nats_server), stdin, io.BytesIO())
    )
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


def _config(server: NatsServerProcess) -> WorkerConfig:
    settings = msgspec.convert({"nats_url": server.url}, PoolSettings)
    return WorkerConfig(worker_id="w_test", host="h", settings=settings)
