"""Turn benchmark: prompt accepted → ``turn.started`` at an SSE client (prints JSON).

Starts its own nats-server, ``agentbus gateway``, ``agentbus pool`` (and for the
reference task ``agentbus sandboxhost`` + ``agentbus broker``), all real processes.
Scenarios:
- ``warm_new_session``: each prompt opens a new session, so every sample goes the
  whole way (wake-up → lease → assignment → a warm worker folds the log); the
  bench waits for ``worker.released`` (T1 set to 20 ms) so a warm worker is idle.
- ``warm_followup``: prompts in one session whose worker already holds it.
- ``cold_worker``: the idle worker is SIGKILLed just before the prompt, so the
  pool must start a worker process on the critical path.
- ``worker_rss``: VmRSS of idle warm workers.
- ``reference_task``: the demo (the 12-step reference task) end to end with the
  scripted model: accepted → ``turn.ended``, new session (sandbox created) each run.
- ``hands`` (``--hands N``): terminal send → output, code-tool overhead and
  fork on a 1,000-file workspace (``bench/hands.py``).
- ``cancel_during_bash``: ``POST /cancel`` while ``sleep 60`` runs in the sandbox →
  ``turn.ended`` at the client (model stream stopped, process group killed).
Latency is measured from the gateway's 202 to the SSE line of ``turn.started``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bench.chaoslib import wait_healthy
from services.common.natsserver import NatsServerProcess, free_port
from services.gateway.tokens import issue

REPO = Path(__file__).resolve().parents[1]
AGENTBUS = Path(sys.executable).parent / "agentbus"
SECRET = "bench-secret"
SAY = json.dumps({"script": [{"say": "ok"}]})


def pct(values: list[float], q: float) -> float:
    """The q-quantile in milliseconds, from seconds."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_ms": pct(values, 0.5),
        "p95_ms": pct(values, 0.95),
        "max_ms": pct(values, 1.0),
        "mean_ms": round(statistics.fmean(values) * 1000, 2),
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


class Stack:
    """The processes under test."""

    def __init__(self, workdir: Path, with_sandbox: bool) -> None:
        self.workdir = workdir
        self.with_sandbox = with_sandbox
        self.nats = NatsServerProcess(workdir / "nats")
        self.port = free_port()
        self.prefix = "bench" + uuid.uuid4().hex[:6]
        self.token = issue(SECRET.encode(), "bench")
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.http: aiohttp.ClientSession | None = None

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env.update(AGENTBUS_BUS_PREFIX=self.prefix, AGENTBUS_NATS_URL=self.nats.url)
        env.update(extra)
        return env

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        with open(self.workdir / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                [str(AGENTBUS), *argv],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_pool(self, workers: int, idle_s: float) -> None:
        self.stop_one("pool")
        env = self.env(
            AGENTBUS_POOL_WORKERS=str(workers),
            AGENTBUS_POOL_IDLE_RELEASE_S=str(idle_s),
            AGENTBUS_APPROVAL="auto",
            AGENTBUS_POOL_LOG_LEVEL="WARNING",
        )
        self.spawn("pool", ["pool"], env)

    def stop_one(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    async def start(self) -> None:
        self.nats.start()
        gw_env = self.env(
            AGENTBUS_DEVICE_SECRET=SECRET,
            AGENTBUS_GATEWAY_RATE_PER_S="0",
            AGENTBUS_GATEWAY_LOG_LEVEL="WARNING",
        )
        listen = f"127.0.0.1:{self.port}"
        argv = ["gateway", "--listen", listen, "--nats", self.nats.url]
        self.spawn("gateway", [*argv, "--data-dir", str(self.workdir)], gw_env)
        if self.with_sandbox:
            await self._start_sandbox()
        self.http = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}"}
        )
        await wait_healthy(self.http, self.url("/healthz"), 30, every_s=0.1)

    async def _start_sandbox(self) -> None:
        from tests.plugins.sandboxhost import SandboxHostProcess

        env = {**os.environ, "AGENTBUS_SANDBOXHOST_LOG_LEVEL": "WARNING"}
        self.host = SandboxHostProcess(self.workdir / "host", env=env)
        await asyncio.to_thread(self.host.start)
        broker_env = self.env(
            AGENTBUS_SANDBOXHOST_URL=self.host.url,
            AGENTBUS_SANDBOXHOST_API_KEY=self.host.api_key,
        )
        self.spawn("broker", ["broker", "--nats", self.nats.url], broker_env)

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.close()
        for name in list(self.procs):
            self.stop_one(name)
        if self.with_sandbox:
            await asyncio.to_thread(self.host.stop)
        self.nats.stop()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def session(self) -> str:
        assert self.http is not None
        async with self.http.post(self.url("/v1/sessions"), json={}) as resp:
            body = await resp.json()
        return str(body["session_id"])

    async def prompt(self, sid: str, text: str) -> float:
        """POST a prompt; the time its 202 arrived."""
        assert self.http is not None
        path = self.url(f"/v1/sessions/{sid}/prompt")
        async with self.http.post(path, json={"text": text}) as resp:
            assert resp.status == 202, await resp.text()
            return time.perf_counter()

    @contextlib.asynccontextmanager
    async def events(self, sid: str) -> AsyncIterator[SseReader]:
        assert self.http is not None
        url = self.url(f"/v1/sessions/{sid}/events")
        async with self.http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as r:
            yield SseReader(r)


class SseReader:
    """Event types off an SSE response, with their arrival time."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def until(self, event_type: str, timeout: float = 60.0) -> float:
        wanted = b"event: " + event_type.encode()
        async with asyncio.timeout(timeout):
            async for raw in self.resp.content:
                if raw.rstrip() == wanted:
                    return time.perf_counter()
        raise RuntimeError(f"stream ended before {event_type}")


async def warm_new_session(stack: Stack, n: int) -> dict[str, Any]:
    samples = []
    for _ in range(n):
        sid = await stack.session()
        async with stack.events(sid) as sse:
            accepted = await stack.prompt(sid, SAY)
            samples.append(await sse.until("turn.started") - accepted)
            await sse.until("worker.released")
    return summary(samples)


async def warm_followup(stack: Stack, n: int) -> dict[str, Any]:
    samples = []
    sid = await stack.session()
    async with stack.events(sid) as sse:
        for _ in range(n):
            accepted = await stack.prompt(sid, SAY)
            samples.append(await sse.until("turn.started") - accepted)
            await sse.until("turn.ended")
    return summary(samples)


async def cold_worker(stack: Stack, n: int) -> dict[str, Any]:
    samples = []
    pool = stack.procs["pool"].pid
    for _ in range(n):
        await wait_workers(pool, 1)
        for pid in children(pool):
            os.kill(pid, signal.SIGKILL)
        sid = await stack.session()
        async with stack.events(sid) as sse:
            accepted = await stack.prompt(sid, SAY)
            samples.append(await sse.until("turn.started") - accepted)
            await sse.until("worker.released")
    return summary(samples)


async def wait_workers(pool_pid: int, count: int) -> list[int]:
    async with asyncio.timeout(30):
        while len(pids := children(pool_pid)) < count:
            await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # let a fresh worker finish importing and connecting
    return pids


async def reference_task(stack: Stack, runs: int) -> dict[str, Any]:
    totals, tools = [], 0
    for _ in range(runs):
        sid = await stack.session()
        async with stack.events(sid) as sse:
            accepted = await stack.prompt(sid, "build the calc package")
            totals.append(await sse.until("turn.ended", timeout=120) - accepted)
    assert stack.http is not None
    url = stack.url(f"/v1/sessions/{sid}/events?follow=0")
    async with stack.http.get(url) as resp:
        body = await resp.text()
    tools = body.count("event: tool.result")
    ok = body.count('"ok":true')
    return {**summary(totals), "tool_calls": tools, "tool_results_ok": ok}


async def cancel_bash(stack: Stack, runs: int) -> dict[str, Any]:
    """POST /cancel while a ``sleep 60`` runs → ``turn.ended`` at the client."""
    assert stack.http is not None
    script = json.dumps({"script": [{"tool": "bash", "args": {"command": "sleep 60"}}]})
    samples = []
    sid = await stack.session()
    async with stack.events(sid) as sse:
        for _ in range(runs):
            await stack.prompt(sid, script)
            await sse.until("tool.update")
            await asyncio.sleep(0.2)  # let the command start in the sandbox
            async with stack.http.post(stack.url(f"/v1/sessions/{sid}/cancel")) as r:
                assert r.status == 202, await r.text()
                asked = time.perf_counter()
            samples.append(await sse.until("turn.ended") - asked)
    return summary(samples)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"bench": "turn", "prompts": args.prompts}
    with tempfile.TemporaryDirectory(prefix="bench-turn-") as tmp:
        stack = Stack(Path(tmp), with_sandbox=not args.no_sandbox)
        await stack.start()
        try:
            stack.start_pool(workers=2, idle_s=0.02)
            pids = await wait_workers(stack.procs["pool"].pid, 2)
            out["worker_rss_mib"] = {
                "idle_workers": [rss_mib(p) for p in pids],
                "target_mib": 60,
            }
            await warm_new_session(stack, 5)  # warm-up
            out["warm_new_session"] = await warm_new_session(stack, args.prompts)
            out["warm_followup"] = await warm_followup(stack, args.prompts)
            stack.start_pool(workers=1, idle_s=0.02)
            out["cold_worker"] = await cold_worker(stack, args.cold)
            out["target_p50_ms"] = 60
            if not args.no_sandbox:
                stack.start_pool(workers=2, idle_s=600)
                await wait_workers(stack.procs["pool"].pid, 2)
                out["reference_task"] = await reference_task(stack, args.runs)
                out["cancel_during_bash"] = await cancel_bash(stack, args.runs)
                if args.hands:  # terminal, code overhead, fork (bench/hands.py)
                    from hands import run as hands

                    out["hands"] = await hands(stack, args.hands)
        finally:
            await stack.stop()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--cold", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5, help="reference task runs")
    parser.add_argument("--no-sandbox", action="store_true")
    parser.add_argument("--hands", type=int, default=0, help="samples (0: skip)")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
