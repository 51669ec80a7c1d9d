"""Run services as child processes: prefixed logs, restart with back-off, clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("agentbus.up")

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # If `agentbus up` is killed outright, the kernel still stops every child.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class ServiceSpec:
    """How to run one service."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    restarts: int = field(default=0)


class Supervisor:
    """Keeps every service running until asked to stop."""

    def __init__(self, backoff_s: float = 0.5, backoff_max_s: float = 30.0) -> None:
        self._backoff = backoff_s
        self._backoff_max = backoff_max_s
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._stopping = asyncio.Event()

    async def run(self, specs: Sequence[ServiceSpec]) -> None:
        """Start all, restart any that dies, return after :meth:`stop`."""
        async with asyncio.TaskGroup() as tg:
            for spec in specs:
                tg.create_task(self._keep_running(spec))

    async def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every child, SIGKILL what is still alive after ``grace_s``."""
        self._stopping.set()
        procs = [p for p in self._procs.values() if p.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        if not procs:
            return
        await asyncio.wait(
            [asyncio.create_task(p.wait()) for p in procs], timeout=grace_s
        )
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

    async def _keep_running(self, spec: ServiceSpec) -> None:
        delay = self._backoff
        while not self._stopping.is_set():
            proc = await asyncio.create_subprocess_exec(
                *spec.argv,
                env=dict(spec.env),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                limit=1 << 20,
                preexec_fn=_die_with_parent,
            )
            self._procs[spec.name] = proc
            log.info("started %s (pid %d)", spec.name, proc.pid)
            assert proc.stdout is not None
            await self._pump(spec.name, proc.stdout)
            code = await proc.wait()
            if self._stopping.is_set():
                log.info("%s stopped (%s)", spec.name, _describe(code))
                return
            spec.restarts += 1
            log.error(
                "%s exited unexpectedly (%s); restart %d in %.1fs",
                spec.name,
                _describe(code),
                spec.restarts,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            delay = min(delay * 2, self._backoff_max)

    async def _pump(self, name: str, stream: asyncio.StreamReader) -> None:
        prefix = f"[{name}] ".encode()
        while line := await stream.readline():
            sys.stdout.buffer.write(prefix + line)
            sys.stdout.buffer.flush()


def _describe(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"
