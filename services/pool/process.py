"""A worker process as the pool sees it: spawn, pipe messages, exit.

The only process the pool package ever starts is its own worker interpreter,
with a fixed argv; nothing an agent asks for runs on this host.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

import msgspec

from services.common.children import signal_child
from services.pool.ipc import FromWorker, WorkerConfig, decode_from_worker, encode
from services.pool.lease import Held

WORKER_ARGV = (sys.executable, "-m", "services.pool.worker")


class WorkerProcess:
    """One warm (or busy) worker child."""

    def __init__(self, worker_id: str, proc: asyncio.subprocess.Process) -> None:
        self.worker_id = worker_id
        self.proc = proc
        self.pid = proc.pid
        self.ready = False
        self.exited = False
        self.held: Held | None = None
        # Since when its session has nothing to do (None: busy or no session).
        self.idle_since: float | None = None
        # Since when it holds its session (busy sessions give way after a share).
        self.held_since: float | None = None
        self.yield_sent = False

    @classmethod
    async def spawn(cls, config: WorkerConfig) -> WorkerProcess:
        """Start the interpreter and hand it its config over stdin."""
        proc = await asyncio.create_subprocess_exec(
            *WORKER_ARGV,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        worker = cls(config.worker_id, proc)
        await worker.send(config)
        return worker

    @property
    def alive(self) -> bool:
        """Not known to have exited (its stdout closes first, then it is reaped)."""
        return not self.exited and self.proc.returncode is None

    def take_session(self) -> Held | None:
        """Forget the session it holds and return it (once: the swap is atomic)."""
        held, self.held = self.held, None
        self.idle_since = None
        self.held_since = None
        self.yield_sent = False
        return held

    @property
    def session_id(self) -> str | None:
        """The session it serves, if any."""
        return self.held.lease.session_id if self.held else None

    async def send(self, msg: msgspec.Struct) -> None:
        """One line on its stdin (lost if it is dying; its exit tells the rest)."""
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            return
        stdin.write(encode(msg))
        with contextlib.suppress(ConnectionError):
            await stdin.drain()

    async def messages(self) -> AsyncIterator[FromWorker]:
        """Its messages until it exits."""
        stdout = self.proc.stdout
        assert stdout is not None
        while line := await stdout.readline():
            yield decode_from_worker(line)
        self.exited = True

    async def wait(self) -> int:
        """Its exit status."""
        return await self.proc.wait()

    def kill(self) -> None:
        """SIGKILL it."""
        if self.alive:
            signal_child(self.proc)

    def close_stdin(self) -> None:
        """Tell it the pool is going (it exits at EOF)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
