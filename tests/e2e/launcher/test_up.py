"""`agentbus up` as a real process: starts the stack, restarts a crash, stops clean."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from services.common.natsserver import free_port
from tests.e2e.launcher.upproc import alive, descendants, wait_for

pytestmark = pytest.mark.timeout(90)


class _Up:
    def __init__(self, tmp_path: Path) -> None:
        self.log_path = tmp_path / "up.log"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")},
            "AGENTBUS_NATS_PORT": str(free_port()),
            "AGENTBUS_SANDBOXHOST_LISTEN": f"127.0.0.1:{free_port()}",
            "AGENTBUS_RESTART_BACKOFF_S": "0.05",
        }
        self.http = f"127.0.0.1:{free_port()}"
        with self.log_path.open("wb") as out:
            self.proc = self._spawn(tmp_path, env, out)

    def _spawn(self, tmp_path: Path, env: dict[str, str], out) -> subprocess.Popen:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli",
                "up",
                "--data-dir",
                str(tmp_path / "data"),
                "--http",
                self.http,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def test_up_starts_every_present_service_and_sigterm_leaves_no_process(tmp_path):
    up = _Up(tmp_path)
    try:
        wait_for(lambda: "device token:" in up.log(), 30, "the banner")
        wait_for(lambda: len(descendants(up.proc.pid)) >= 2, 30, "children")
        children = descendants(up.proc.pid)
        assert "nats-server on nats://127.0.0.1:" in up.log()
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(timeout=30) == 0
        wait_for(lambda: not any(alive(p) for p in children), 10, "children to exit")
        assert "[up] stopped" in up.log()
    finally:
        if up.proc.poll() is None:
            up.proc.kill()


def test_up_restarts_a_crashed_service_and_says_which_and_why(tmp_path):
    up = _Up(tmp_path)
    try:
        wait_for(lambda: "started sandboxhost (pid" in up.log(), 30, "sandboxhost")
        line = next(x for x in up.log().splitlines() if "started sandboxhost (pid" in x)
        pid = int(line.rsplit("pid ", 1)[1].rstrip(")"))
        os.kill(pid, signal.SIGKILL)
        wait_for(
            lambda: "sandboxhost exited unexpectedly (killed by SIGKILL)" in up.log(),
            20,
            "the crash report",
        )
        wait_for(lambda: up.log().count("started sandboxhost (pid") >= 2, 20, "restart")
    finally:
        up.proc.send_signal(signal.SIGTERM)
        up.proc.wait(timeout=30)


def test_up_refuses_an_unknown_agentbus_variable(tmp_path):
    env = {**os.environ, "AGENTBUS_NOT_A_SETTING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "up", "--data-dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "AGENTBUS_NOT_A_SETTING" in result.stderr


def test_up_refuses_more_replicas_than_embedded_nodes(tmp_path):
    env = {**os.environ, "AGENTBUS_JS_REPLICAS": "3"}
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "up", "--data-dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "AGENTBUS_JS_REPLICAS" in result.stderr
    assert "--nats-cluster 3" in result.stderr
