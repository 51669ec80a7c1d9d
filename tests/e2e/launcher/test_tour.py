"""The README tour, end to end on `agentbus up`: every service a real process.

Session → prompt (the built-in demo: 12 steps, then terminal, code and lsp;
scripted model) → approvals answered from the event stream → files read back
through the file API → `agentbus audit`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from services.common.natsserver import free_port
from tests.support.eventually import eventually

pytestmark = pytest.mark.timeout(180)


class Stack:
    """`agentbus up` in a temp dir on free ports."""

    def __init__(self, tmp_path: Path) -> None:
        self.data_dir = tmp_path / "data"
        self.log_path = tmp_path / "up.log"
        self.http = f"127.0.0.1:{free_port()}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env |= {
            "AGENTBUS_NATS_PORT": str(free_port()),
            "AGENTBUS_SANDBOXHOST_LISTEN": f"127.0.0.1:{free_port()}",
            "AGENTBUS_MODEL_API_KEY": "sk-tour-secret-must-not-leak",
        }
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "services.cli",
                    "up",
                    "--data-dir",
                    str(self.data_dir),
                    "--http",
                    self.http,
                    "--workers",
                    "1",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def token(self) -> str:
        for line in self.log().splitlines():
            if "device token:" in line:
                return line.split("device token:")[1].split()[0]
        raise AssertionError("no token in the banner")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)


async def _events(http: aiohttp.ClientSession, url: str, out: list[dict]) -> None:
    """Follow an SSE stream, appending each event's JSON to ``out``."""
    async with http.get(url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))


async def test_readme_tour_runs_the_demo_end_to_end(tmp_path):
    stack = Stack(tmp_path)
    try:
        await _run_tour(stack)
    finally:
        stack.stop()
    assert stack.proc.returncode == 0


async def _run_tour(stack: Stack) -> None:
    base = f"http://{stack.http}"
    async with aiohttp.ClientSession() as anon:

        async def healthy() -> bool:
            try:
                async with anon.get(f"{base}/healthz") as r:
                    return r.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(healthy, 60, what="the gateway")
    headers = {"Authorization": f"Bearer {stack.token()}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(f"{base}/v1/sessions", json={"title": "tour"}) as r:
            assert r.status == 201
            sid = (await r.json())["session_id"]
        seen: list[dict] = []
        follower = asyncio.create_task(
            _events(http, f"{base}/v1/sessions/{sid}/events", seen)
        )
        async with http.post(
            f"{base}/v1/sessions/{sid}/prompt", json={"text": "build me a calculator"}
        ) as r:
            assert r.status == 202
        await _answer_until_done(http, base, sid, seen)
        follower.cancel()
        await _check_stream(seen)
        await _check_files(http, base, sid)
    _check_audit(stack, sid)


async def _answer_until_done(http, base: str, sid: str, seen: list[dict]) -> None:
    answered: set[str] = set()

    async def done() -> bool:
        for ev in list(seen):
            if ev["type"] == "permission.requested":
                rid = ev["data"]["request_id"]
                if rid not in answered:
                    answered.add(rid)
                    url = f"{base}/v1/sessions/{sid}/permissions/{rid}"
                    async with http.post(url, json={"option": "allow_once"}) as r:
                        assert r.status == 200
        return any(ev["type"] == "turn.ended" for ev in seen)

    await eventually(done, 120, what="the demo turn to end")
    assert answered, "ask-exec should have asked before bash"


async def _check_stream(seen: list[dict]) -> None:
    seqs = [ev["seq"] for ev in seen]
    assert seqs == list(range(1, len(seqs) + 1))
    types = [ev["type"] for ev in seen]
    ended = next(ev for ev in seen if ev["type"] == "turn.ended")
    assert ended["data"]["stop_reason"] == "end_turn"
    results = [ev for ev in seen if ev["type"] == "tool.result"]
    assert len(results) == 15  # the 12 steps, then terminal, code and lsp once
    assert all(ev["data"]["ok"] for ev in results), results
    assert "5 42" in results[12]["data"]["output"]
    assert "- `safe_div`" in results[13]["data"]["output"]
    assert results[14]["data"]["output"] == "(no problems)"
    for t in ("worker.assigned", "turn.started", "agent.message", "sandbox.state"):
        assert t in types


async def _check_files(http, base: str, sid: str) -> None:
    async with http.get(f"{base}/v1/sessions/{sid}/files/calc/ops.py") as r:
        assert r.status == 200
        text = await r.text()
    assert "def safe_div" in text
    assert "ValueError" in text
    async with http.put(
        f"{base}/v1/sessions/{sid}/files/notes/a.txt", data=b"hi\x00"
    ) as r:
        assert r.status == 200
        assert (await r.json())["size"] == 3
    async with http.get(f"{base}/v1/sessions/{sid}/files/notes/a.txt") as r:
        assert await r.read() == b"hi\x00"
    async with http.get(f"{base}/v1/sessions/{sid}/files/calc") as r:
        names = {e["name"] for e in (await r.json())["entries"]}
    assert {"__init__.py", "ops.py"} <= names
    async with http.get(f"{base}/v1/sessions/{sid}/files/..%2F..%2Fetc%2Fpasswd") as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "path_outside_workspace"


def _check_audit(stack: Stack, sid: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "audit",
            sid,
            "--data-dir",
            str(stack.data_dir),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "build me a calculator" in result.stdout
    assert "hash chain verifies" in result.stdout
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "sandboxhost",
            "env",
            "--data-dir",
            str(stack.data_dir / "sandboxhost"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout
    lines = dict(line.split("=", 1) for line in shown.split())
    assert lines["E2B_API_KEY"].startswith("e2b_")
    assert lines["E2B_API_URL"] == lines["E2B_SANDBOX_URL"]
