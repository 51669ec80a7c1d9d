"""Run ``agentbus up`` as a real process and read what it records (test helper)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.chaoslib import descendants
from bench.chaoslib import pid_alive as alive
from services.common.natsserver import free_port

# The process helpers are the chaos bench's (one copy of /proc walking).
__all__ = ["STATUS", "UpProcess", "alive", "descendants", "up_env", "wait_for"]

STATUS = (sys.executable, "-m", "services.cli", "status", "--json")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def up_env() -> dict[str, str]:
    """The test's environment without AGENTBUS_* plus free ports."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")},
        "AGENTBUS_NATS_PORT": str(free_port()),
        "AGENTBUS_SANDBOXHOST_LISTEN": f"127.0.0.1:{free_port()}",
        "AGENTBUS_RESTART_BACKOFF_S": "0.05",
    }


class UpProcess:
    """One ``agentbus up`` on ``data_dir`` with its log in ``log_path``."""

    def __init__(self, data_dir: Path, log_path: Path, *args: str) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.http = f"127.0.0.1:{free_port()}"
        argv = [sys.executable, "-m", "services.cli", "up", "--data-dir"]
        argv += [str(data_dir), "--http", self.http, *args]
        with log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=up_env()
            )

    def log(self) -> str:
        """Everything up printed so far."""
        return self.log_path.read_text(errors="replace")

    def state(self) -> dict[str, Any]:
        """``up.json`` (empty if not written yet)."""
        try:
            data: dict[str, Any] = json.loads((self.data_dir / "up.json").read_text())
        except (OSError, ValueError):
            return {}
        return data

    def wait_started(self, timeout: float = 60) -> None:
        """Until the banner is out (NATS ready, services starting)."""
        wait_for(lambda: "device token:" in self.log(), timeout, "the banner")

    def status(self) -> dict[str, Any]:
        """``agentbus status --json`` of this data dir."""
        out = subprocess.run(
            [*STATUS, "--data-dir", str(self.data_dir)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        report: dict[str, Any] = json.loads(out.stdout)
        return report

    def close(self) -> None:
        """SIGTERM and wait (SIGKILL if it hangs)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
