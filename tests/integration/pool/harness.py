"""Test harness: pools (in-process, or real ``agentbus pool`` processes) on NATS.

Workers are always real child processes. Tests act as the gateway: they append
``session.created`` / ``user.prompt`` / answers to the log and follow it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client

from eventstore.log import JetStreamLog
from schemas.events import (
    Event,
    Payload,
    PermissionResolved,
    SessionCreated,
    TurnCancelRequested,
    UserPrompt,
)
from schemas.ids import new_id
from schemas.names import BusNames
from services.pool.pool import WarmPool
from services.pool.service import run
from services.pool.settings import PoolSettings
from tests.support.eventually import eventually

REPO = Path(__file__).resolve().parents[3]
AGENTBUS = Path(sys.executable).parent / "agentbus"


class RunningPool:
    """An in-process pool (its workers are real processes)."""

    def __init__(self, pool: WarmPool, task: asyncio.Task[None], stop: asyncio.Event):
        self.pool = pool
        self.task = task
        self.stop_event = stop

    async def stop(self) -> None:
        """Stop it and wait for its workers to exit."""
        self.stop_event.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), 30)
        except TimeoutError:
            for task in asyncio.all_tasks():  # say where the pool is stuck
                task.print_stack(file=sys.stderr)
            raise


class PoolProcess:
    """``agentbus pool`` as a real process (for SIGKILL of a pool whole)."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(AGENTBUS), "pool"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=REPO,
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL the pool process only (its workers see their stdin close)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Harness:
    """Plays the gateway's part and starts pools for one test (unique prefix)."""

    def __init__(
        self, nc: Client, names: BusNames, url: str, stack: AsyncExitStack, tmp: Path
    ) -> None:
        self.nc = nc
        self.names = names
        self.url = url
        self.stack = stack
        self.tmp = tmp
        self.log = JetStreamLog(nc, names)

    def settings(self, **over: Any) -> PoolSettings:
        base: dict[str, Any] = {
            "nats_url": self.url,
            "bus_prefix": self.names.prefix,
            "pool_workers": 1,
            "pool_lease_ttl_s": 2.0,
            "pool_wake_ack_wait_s": 5.0,
            "pool_drain_s": 2.0,
            "approval": "auto",
        }
        base.update(over)
        return msgspec.convert(base, PoolSettings)

    async def pool(self, **over: Any) -> RunningPool:
        """Start an in-process pool and wait until all its workers are warm."""
        stop = asyncio.Event()
        started: asyncio.Future[WarmPool] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(run(self.settings(**over), stop, started=started))
        pool = await asyncio.wait_for(started, 20)
        running = RunningPool(pool, task, stop)
        self.stack.push_async_callback(running.stop)
        ready = pool.settings.pool_workers
        await self.until(lambda: sum(w.ready for w in pool.workers) >= ready)
        return running

    def pool_process(self, **over: Any) -> PoolProcess:
        """A real ``agentbus pool`` process with these settings (started)."""
        settings = self.settings(**over)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        for field in settings.__struct_fields__:
            value = getattr(settings, field)
            if value is not None:
                env[f"AGENTBUS_{field.upper()}"] = str(value)
        proc = PoolProcess(env, self.tmp / f"pool-{new_id('p')}.log")
        proc.start()
        self.stack.callback(proc.stop)
        return proc

    async def until(self, cond: Callable[[], bool], timeout: float = 20.0) -> None:
        """Wait for a condition (polled on the loop, with a deadline)."""
        await eventually(cond, timeout)

    async def until_async(
        self, cond: Callable[[], Awaitable[bool]], timeout: float = 20.0
    ) -> None:
        """Wait for an async condition."""
        await eventually(cond, timeout)

    async def session(self) -> str:
        sid = new_id("s")
        await self.log.append(sid, SessionCreated(device_id="d1"), actor="device:d1")
        return sid

    async def append(self, sid: str, payload: Payload) -> int:
        return (await self.log.append(sid, payload, actor="device:d1")).seq

    async def prompt(self, sid: str, text: str) -> tuple[int, str]:
        turn = new_id("t")
        return await self.append(sid, UserPrompt(text=text, turn_id=turn)), turn

    async def script(self, sid: str, *steps: dict[str, Any]) -> tuple[int, str]:
        return await self.prompt(sid, json.dumps({"script": list(steps)}))

    async def cancel(self, sid: str, turn_id: str) -> int:
        return await self.append(sid, TurnCancelRequested(turn_id=turn_id))

    async def answer(self, sid: str, request_id: str, option: str) -> int:
        return await self.append(
            sid,
            PermissionResolved(request_id=request_id, option=option),  # type: ignore[arg-type]
        )

    async def wait_for(
        self,
        sid: str,
        pred: Callable[[Event], bool],
        after: int = 0,
        timeout: float = 30.0,
    ) -> Event:
        """The first event after ``after`` that matches."""
        try:
            async with asyncio.timeout(timeout):
                async for stored in self.log.tail(sid, after):
                    event = stored.event()
                    if pred(event):
                        return event
        except TimeoutError:
            seen = [(e.seq, e.type, e.actor) for e in await self.events(sid)]
            raise AssertionError(
                f"no matching event in {timeout}s; log: {seen}"
            ) from None
        raise AssertionError("tail ended")

    async def ended(self, sid: str, turn_id: str, timeout: float = 30.0) -> Event:
        """The ``turn.ended`` of a turn."""
        return await self.wait_for(
            sid,
            lambda e: e.type == "turn.ended" and e.data.turn_id == turn_id,
            timeout=timeout,
        )

    async def events(self, sid: str) -> list[Event]:
        return [s.event() for s in await self.log.read(sid)]


def warm(pool: WarmPool) -> list[Any]:
    """Its idle ready workers."""
    return [w for w in pool.workers if w.ready and w.held is None]


def busy(pool: WarmPool) -> list[Any]:
    """Its workers that hold a session."""
    return [w for w in pool.workers if w.held is not None]
