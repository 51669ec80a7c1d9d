"""Gateway hardening and push benchmark (prints JSON).

Starts its own nats-server, a gateway and a notifier process. Scenarios:
- ``slowloris``: N raw sockets (default 2,000) trickle an unfinished request
  head; how long until the gateway has dropped them all (the deadline is
  ``--header-timeout``), and ``/healthz`` latency for a normal client meanwhile.
- ``push``: M ``turn.ended`` events appended to a session whose device has a
  webhook on a loopback receiver: append → receiver latency, all delivered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import nats
from aiohttp import web

from bench.chaoslib import wait_healthy
from eventstore.log import JetStreamLog
from schemas.events import TurnEnded
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess, free_port
from services.gateway.tokens import issue

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-secret"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


class Stack:
    def __init__(self, workdir: Path, header_timeout: float) -> None:
        self.workdir = workdir
        self.nats = NatsServerProcess(workdir / "nats")
        self.port = free_port()
        self.prefix = "bench" + uuid.uuid4().hex[:6]
        self.header_timeout = header_timeout
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env.update(
            AGENTBUS_DEVICE_SECRET=SECRET,
            AGENTBUS_BUS_PREFIX=self.prefix,
            AGENTBUS_GATEWAY_RATE_PER_S="0",
            AGENTBUS_GATEWAY_HEADER_TIMEOUT_S=str(self.header_timeout),
            AGENTBUS_WEBHOOK_ALLOW_PRIVATE="1",
        )
        with open(self.workdir / f"{name}.log", "ab") as log:
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", f"services.{name}", *args],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )

    async def start(self) -> None:
        self.nats.start()
        self.spawn(
            "gateway", "--listen", f"127.0.0.1:{self.port}", "--nats", self.nats.url,
            "--data-dir", str(self.workdir),
        )  # fmt: skip
        self.spawn("notifier", "--nats", self.nats.url)
        self.nc = await nats.connect(self.nats.url)
        self.log = JetStreamLog(self.nc, BusNames(self.prefix))
        self.http = aiohttp.ClientSession()
        async with asyncio.timeout(30):
            await wait_healthy(self.http, self.url("/healthz"), 30)
            notifier_log = self.workdir / "notifier.log"
            while "notifier running" not in notifier_log.read_text(errors="replace"):
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        await self.http.close()
        await self.nc.close()
        for proc in self.procs:
            proc.terminate()
            proc.wait(30)
        self.nats.stop()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


async def slowloris(stack: Stack, sockets: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    conns = []
    for _ in range(sockets):
        reader, writer = await asyncio.open_connection("127.0.0.1", stack.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        conns.append((reader, writer))
    opened = loop.time() - started
    dropped_at: list[float] = []

    async def watch(reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.read()
        dropped_at.append(loop.time() - started)

    watchers = [asyncio.create_task(watch(r)) for r, _ in conns]
    latencies = []
    while len(dropped_at) < sockets and loop.time() - started < 120:
        t0 = time.perf_counter()
        async with (
            aiohttp.ClientSession() as fresh,
            fresh.get(stack.url("/healthz")) as r,
        ):
            assert r.status == 200
        latencies.append(time.perf_counter() - t0)
        await asyncio.sleep(0.05)  # pacing the probe, not synchronisation
    await asyncio.gather(*watchers)
    for _, writer in conns:
        writer.close()
    return {
        "sockets": sockets,
        "header_timeout_s": stack.header_timeout,
        "open_all_s": round(opened, 2),
        "all_dropped_after_s": round(max(dropped_at), 2),
        "first_dropped_after_s": round(min(dropped_at), 2),
        "healthz_during_ms": {"n": len(latencies), "p50": pct(latencies, 0.5),
                              "p99": pct(latencies, 0.99)},
    }  # fmt: skip


async def push(stack: Stack, events: int, rate: float) -> dict[str, Any]:
    arrived: dict[str, float] = {}
    done = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        arrived.setdefault(request.headers["webhook-id"], time.perf_counter())
        if len(arrived) >= events:
            done.set()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    headers = {"Authorization": f"Bearer {issue(SECRET.encode(), 'bench')}"}
    body = {"url": f"http://127.0.0.1:{port}/hook", "events": ["turn.ended"]}
    async with stack.http.put(stack.url("/v1/webhooks"), json=body, headers=headers):
        pass
    async with stack.http.post(
        stack.url("/v1/sessions"), json={}, headers=headers
    ) as r:
        sid = (await r.json())["session_id"]
    sent: dict[str, float] = {}
    started = time.perf_counter()
    for i in range(events):
        if rate:
            await asyncio.sleep(1 / rate)  # pacing, not synchronisation
        t0 = time.perf_counter()
        stored = await stack.log.append(
            sid, TurnEnded(turn_id=f"t{i}", stop_reason="end_turn"), actor="w"
        )
        sent[stored.event().id] = t0
    appended = time.perf_counter() - started
    async with asyncio.timeout(120):
        await done.wait()
    elapsed = time.perf_counter() - started
    await runner.cleanup()
    lat = [arrived[k] - sent[k] for k in sent if k in arrived]
    return {
        "events": events,
        "rate_per_s": rate or "burst",
        "delivered": len(arrived),
        "append_to_receiver_ms": {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
                                  "mean": round(statistics.mean(lat) * 1000, 2)},
        "append_all_s": round(appended, 2),
        "last_delivered_after_s": round(elapsed, 2),
        "deliveries_per_s": round(len(arrived) / elapsed, 1),
    }  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sockets", type=int, default=2000)
    parser.add_argument("--header-timeout", type=float, default=5.0)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--paced", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp), args.header_timeout)
        await stack.start()
        try:
            result = {
                "slowloris": await slowloris(stack, args.sockets),
                "push_paced": await push(stack, args.paced, 20.0),
                "push_burst": await push(stack, args.events, 0.0),
            }
        finally:
            await stack.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
