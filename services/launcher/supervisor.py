"""Run services as child processes: prefixed logs, restart with back-off, clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("agentbus.up")

PR_SET_PDEATHSIG = 1


def _die_with_parent(sig: signal.Signals) -> None:
    # If `agentbus up` is killed outright, the kernel still stops every child.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, sig)


@dataclass
class ServiceSpec:
    """How to run one service."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    restarts: int = field(default=0)
    # Open descriptors the child inherits (a nats-server's store lock).
    pass_fds: tuple[int, ...] = ()
    pid: int | None = None
    alive: bool = False
    # Sent by the kernel when `up` dies. SIGKILL by default: every service must
    # survive its own SIGKILL anyway, and one stuck in start-up (NATS gone with
    # `up`) would outlive a SIGTERM. nats-server and the sandbox host get
    # SIGTERM: a clean JetStream flush, sandboxes torn down.
    death_signal: signal.Signals = signal.SIGKILL


class Supervisor:
    """Keeps every service running until asked to stop."""

    def __init__(
        self,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
        *,
        healthy_s: float = 30.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._backoff = backoff_s
        self._backoff_max = backoff_max_s
        # A child that ran this long was healthy: its next crash waits backoff_s.
        self._healthy = healthy_s
        self._on_change = on_change or (lambda: None)
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self.specs: list[ServiceSpec] = []
        self.delays: list[float] = []

    def start(self, spec: ServiceSpec) -> asyncio.Task[None]:
        """Start ``spec`` now and keep it running until :meth:`stop`."""
        self.specs.append(spec)
        task = asyncio.create_task(self._keep_running(spec))
        self._tasks.add(task)
        return task

    async def run(self, specs: Sequence[ServiceSpec]) -> None:
        """Start all, restart any that dies, return after :meth:`stop`."""
        for spec in specs:
            self.start(spec)
        await asyncio.gather(*self._tasks)

    async def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every child, SIGKILL what is still alive after ``grace_s``."""
        await self.stop_only(list(self._procs), grace_s)

    async def stop_only(self, names: Sequence[str], grace_s: float = 10.0) -> None:
        """Stop the named children (all of them: the supervisor is stopping)."""
        self._stopping.set()
        procs = [
            p for n, p in self._procs.items() if n in names and p.returncode is None
        ]
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
            started = time.monotonic()
            code = await self._run_once(spec)
            if self._stopping.is_set():
                log.info("%s stopped (%s)", spec.name, _describe(code))
                return
            if time.monotonic() - started >= self._healthy:
                delay = self._backoff
            spec.restarts += 1
            self._on_change()
            self.delays.append(delay)
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

    async def _run_once(self, spec: ServiceSpec) -> int:
        proc = await asyncio.create_subprocess_exec(
            *spec.argv,
            env=dict(spec.env),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            limit=1 << 20,
            preexec_fn=functools.partial(_die_with_parent, spec.death_signal),
            pass_fds=spec.pass_fds,
        )
        self._procs[spec.name] = proc
        spec.pid, spec.alive = proc.pid, True
        self._on_change()
        log.info("started %s (pid %d)", spec.name, proc.pid)
        assert proc.stdout is not None
        await self._pump(spec.name, proc.stdout)
        code = await proc.wait()
        spec.alive = False
        self._on_change()
        return code

    async def _pump(self, name: str, stream: asyncio.StreamReader) -> None:
        prefix = f"[{name}] ".encode()
        while line := await stream.readline():
            sys.stdout.buffer.write(prefix + line)
            sys.stdout.buffer.flush()


def _describe(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"
