"""pytest plugin: a REAL ``agentbus sandboxhost`` process for tests.

Fixtures:
- ``sandboxhost`` (session): one running host per pytest process (per xdist worker).
- ``sandboxhost_factory`` (function): start private hosts (restart tests, custom env).

Both yield :class:`SandboxHostProcess`: ``.url`` (control plane AND envd base URL),
``.api_key``, ``.data_dir``, ``.pid``, ``.env()`` (E2B_* variables for an SDK),
``.set_faults(**fields)`` / ``.clear_faults()`` (see docs/architecture.md §7),
``.info()``, ``.stop()``, ``.kill()``, ``.start()``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from services.common.natsserver import free_port

REPO = Path(__file__).resolve().parents[2]
AGENTBUS = Path(sys.executable).parent / "agentbus"


class SandboxHostProcess:
    """A real sandbox host process on a free loopback port."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = ""
        self._env = dict(os.environ if env is None else env)
        self._args = extra_args or []
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """OS pid of the host process."""
        return self._proc.pid if self._proc else None

    @property
    def log_path(self) -> Path:
        """Where the host's stderr goes."""
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def start(self, timeout: float = 20.0) -> None:
        """Start the process and wait until ``/health`` answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [str(AGENTBUS), "sandboxhost", "--listen", f"127.0.0.1:{self.port}"]
        argv += ["--data-dir", str(self.data_dir), *self._args]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=self._env, cwd=REPO
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"sandboxhost exited: {self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=0.5):
                    break
            except OSError:
                time.sleep(0.02)
        else:
            raise RuntimeError(
                f"sandboxhost did not answer: {self.log_path.read_text()}"
            )
        key = self._env.get("AGENTBUS_SANDBOXHOST_API_KEY")
        self.api_key = key or (self.data_dir / "api_key").read_text().strip()

    def env(self) -> dict[str, str]:
        """The E2B_* variables with which an E2B SDK reaches this host."""
        return {
            "E2B_API_URL": self.url,
            "E2B_SANDBOX_URL": self.url,
            "E2B_API_KEY": self.api_key,
        }

    def _admin(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"X-API-KEY": self.api_key, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"null")

    def set_faults(self, **fields: Any) -> dict[str, Any]:
        """``POST /admin/faults``: fail_resumes, resume_status, delay_ms, swap."""
        result: dict[str, Any] = self._admin("POST", "/admin/faults", fields)
        return result

    def clear_faults(self) -> None:
        """Switch every fault off."""
        self._admin("DELETE", "/admin/faults")

    def info(self) -> dict[str, Any]:
        """``GET /admin/info``: isolation, cgroups, envdVersion."""
        result: dict[str, Any] = self._admin("GET", "/admin/info")
        return result

    def _signal(self, sig: int) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        """Graceful stop (SIGTERM)."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """Crash (SIGKILL); sandboxes die with it (die-with-parent)."""
        self._signal(signal.SIGKILL)


@pytest.fixture(scope="session")
def sandboxhost(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SandboxHostProcess]:
    """One real sandbox host for the whole test session (per xdist worker)."""
    host = SandboxHostProcess(tmp_path_factory.mktemp("sandboxhost") / "data")
    host.start()
    yield host
    host.stop()


@pytest.fixture
def sandboxhost_factory(tmp_path: Path) -> Iterator[Any]:
    """Start private sandbox hosts: ``factory(env=..., data_dir=...)``."""
    started: list[SandboxHostProcess] = []

    def make(
        env: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
        extra_args: list[str] | None = None,
    ) -> SandboxHostProcess:
        host = SandboxHostProcess(
            data_dir or tmp_path / f"host{len(started)}", env=env, extra_args=extra_args
        )
        host.start()
        started.append(host)
        return host

    yield make
    for host in started:
        host.stop()
