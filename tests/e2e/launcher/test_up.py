"""`agentbus up` as a real process: starts the stack, restarts a crash, stops clean."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.common.natsserver import free_port

pytestmark = pytest.mark.timeout(90)


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (walks /proc children files)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                if kid not in found:
                    found.add(kid)
                    todo.append(kid)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.split(") ", 1)[1][0] != "Z"


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


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
        _wait_for(lambda: "device token:" in up.log(), 30, "the banner")
        _wait_for(lambda: len(_descendants(up.proc.pid)) >= 2, 30, "children")
        children = _descendants(up.proc.pid)
        assert "nats-server on nats://127.0.0.1:" in up.log()
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(timeout=30) == 0
        _wait_for(lambda: not any(_alive(p) for p in children), 10, "children to exit")
        assert "[up] stopped" in up.log()
    finally:
        if up.proc.poll() is None:
            up.proc.kill()


def test_up_restarts_a_crashed_service_and_says_which_and_why(tmp_path):
    up = _Up(tmp_path)
    try:
        _wait_for(lambda: "started sandboxhost (pid" in up.log(), 30, "sandboxhost")
        line = next(x for x in up.log().splitlines() if "started sandboxhost (pid" in x)
        pid = int(line.rsplit("pid ", 1)[1].rstrip(")"))
        os.kill(pid, signal.SIGKILL)
        _wait_for(
            lambda: "sandboxhost exited unexpectedly (killed by SIGKILL)" in up.log(),
            20,
            "the crash report",
        )
        _wait_for(
            lambda: up.log().count("started sandboxhost (pid") >= 2, 20, "restart"
        )
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
