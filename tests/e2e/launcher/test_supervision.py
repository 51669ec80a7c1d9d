"""`agentbus up` supervises nats-server; one up per data dir; SIGKILL leaves nothing.

Also `agentbus status` (its JSON shape) against the same running stack.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.launcher.upproc import UpProcess, alive, descendants, wait_for

pytestmark = pytest.mark.timeout(120)


def _node(up: UpProcess, name: str = "nats-0") -> dict:
    return next(n for n in up.state()["nats"] if n["name"] == name)


def _listening(url: str) -> bool:
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def test_nats_sigkill_is_restarted_on_the_same_port_and_store(tmp_path: Path) -> None:
    up = UpProcess(tmp_path / "data", tmp_path / "up.log")
    try:
        up.wait_started()
        before = _node(up)
        os.kill(before["pid"], signal.SIGKILL)
        after = wait_for(
            lambda: (n := _node(up))["pid"] != before["pid"] and alive(n["pid"]) and n,
            30,
            "a new nats-server",
        )
        assert (after["url"], after["store"]) == (before["url"], before["store"])
        assert after["restarts"] == 1
        wait_for(lambda: _listening(after["url"]), 20, "NATS on the same port")
        assert "nats-0 exited unexpectedly (killed by SIGKILL)" in up.log()
        # JetStream recovers its store after the restart: ask until it answers.
        report = wait_for(
            lambda: (r := up.status())["streams"] and r, 60, "status with streams"
        )
        assert set(report) >= {"nats", "streams", "services"}
        assert {"name", "pid", "alive"} <= set(report["nats"][0])
        log_stream = next(s for s in report["streams"] if s["name"].endswith("_LOG"))
        assert {"name", "replicas", "leader"} <= set(log_stream)
        assert log_stream["replicas"] == 1
        assert log_stream["leader"] == "nats-0"
        assert {s["name"] for s in report["services"]} >= {"gateway", "pool"}
    finally:
        up.close()


def test_second_up_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    first = UpProcess(tmp_path / "data", tmp_path / "up1.log")
    try:
        first.wait_started()
        servers = _nats_servers(tmp_path)
        data = tmp_path / "data"
        second = subprocess.run(
            [sys.executable, "-m", "services.cli", "up", "--data-dir", str(data)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode == 1
        assert "in use by another `agentbus up`" in second.stderr
        assert "started nats" not in second.stdout
        assert _nats_servers(tmp_path) == servers
        assert len(servers) == 1
    finally:
        first.close()


def test_sigkill_of_up_leaves_no_process_behind(tmp_path: Path) -> None:
    up = UpProcess(tmp_path / "data", tmp_path / "up.log")
    try:
        up.wait_started()
        wait_for(lambda: len(up.state().get("services", [])) >= 2, 30, "services")
        children = descendants(up.proc.pid)
        assert _node(up)["pid"] in children
        up.proc.kill()
        up.proc.wait()
        wait_for(lambda: not any(alive(p) for p in children), 20, "every child to exit")
        # The store lock went with them: up starts again on the same data dir.
        again = UpProcess(tmp_path / "data", tmp_path / "up2.log")
        try:
            again.wait_started()
        finally:
            again.close()
    finally:
        up.close()


def _nats_servers(under: Path) -> set[int]:
    """nats-server processes whose config lives under ``under``."""
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        argv = cmd.split(b"\0")
        if b"nats-server" in argv[0] and str(under).encode() in cmd:
            found.add(int(proc.name))
    return found
