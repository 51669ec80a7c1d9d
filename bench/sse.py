"""SSE bridge benchmark: fan-out, live latency, replay and reconnect (prints JSON).

Starts its own nats-server and gateway process. Scenarios:
- ``latency_1k``: one client, events appended at 1k/s: append → SSE latency.
- ``fanout``: N clients (default 1,000) following one session at 100 events/s:
  delivery latency over every (client, event), gateway RSS and CPU.
- ``resume_100``: reconnect with 100 missed events: time to first / last event.
- ``replay_10k``: 10k events over SSE from a cursor (``follow=0``).
- ``reconnect_100k``: a 100k-event session, 100 missed: time to the last event.

Clients are raw asyncio protocols that only pick ``id:`` lines out of the byte
stream, so the bench itself costs as little CPU as possible on a shared box.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import nats

from bench.chaoslib import process_usage, wait_healthy
from eventstore.log import JetStreamLog
from schemas.events import ToolUpdate
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess, free_port
from services.gateway.tokens import issue

SECRET = "bench-secret"
ID_LINE = re.compile(rb"(?m)^id: (\d+)$")


def pct(values: list[float] | array, q: float) -> float:
    """The q-quantile (0..1) in milliseconds, from seconds."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


class SseCounter(asyncio.Protocol):
    """A minimal SSE client: records (seq, arrival time) of every ``id:`` line."""

    def __init__(self, sent: dict[int, float], latencies: array) -> None:
        self.sent = sent
        self.latencies = latencies
        self.buf = b""
        self.count = 0
        self.last = 0
        self.first_at: float | None = None
        self.last_at = 0.0
        self.target = 0
        self.reached = asyncio.Event()
        self.closed = asyncio.Event()
        self.gaps = 0

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        buf = self.buf + data
        cut = buf.rfind(b"\n") + 1
        for match in ID_LINE.finditer(buf, 0, cut):
            seq = int(match.group(1))
            if seq != self.last + 1 and self.last:
                self.gaps += 1
            self.last = seq
            self.count += 1
            self.first_at = self.first_at or now
            self.last_at = now
            sent = self.sent.get(seq)
            if sent is not None:
                self.latencies.append(now - sent)
            if self.target and seq >= self.target:
                self.reached.set()
        self.buf = buf[cut:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()
        self.reached.set()

    def expect(self, target: int) -> None:
        """Set ``reached`` once seq ``target`` arrived (maybe already)."""
        self.target = target
        if self.last >= target:
            self.reached.set()


async def open_sse(
    port: int, sid: str, token: str, query: str, proto: SseCounter
) -> asyncio.Transport:
    """GET the event stream over a raw connection feeding ``proto``."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(lambda: proto, "127.0.0.1", port)
    transport.write(_request(sid, token, query))
    return transport  # type: ignore[return-value]


def _request(sid: str, token: str, query: str) -> bytes:
    return (
        f"GET /v1/sessions/{sid}/events{query} HTTP/1.1\r\nHost: bench\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n"
        "Connection: close\r\n\r\n"
    ).encode()


class SinkCounter(asyncio.Protocol):
    """An untimed follower: counts frames at C speed, keeps the stream's tail."""

    def __init__(self) -> None:
        self.frames = 0
        self.carry = b""
        self.tail = b""
        self.closed = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        # 4 carried bytes: a marker split across reads counts once, none twice.
        joined = self.carry + data
        self.frames += joined.count(b"\nid: ")
        self.carry = joined[-4:]
        self.tail = (self.tail + data)[-2048:]  # holds the last frame whole

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def last_id(self) -> int:
        found = ID_LINE.findall(self.tail)
        return int(found[-1]) if found else 0


async def open_sink(
    port: int, sid: str, token: str, sink: SinkCounter
) -> asyncio.BaseTransport:
    """A follower that only counts."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(lambda: sink, "127.0.0.1", port)
    transport.write(_request(sid, token, "?after=1"))
    return transport


async def sink_worker(port: int, sid: str, token: str, count: int, last: int) -> None:
    """Run ``count`` counting followers in this process (``--sink-worker``)."""
    sinks = [SinkCounter() for _ in range(count)]
    for i in range(0, count, 100):
        await asyncio.gather(
            *(open_sink(port, sid, token, k) for k in sinks[i : i + 100])
        )
    print("ready", flush=True)
    try:
        async with asyncio.timeout(300):
            while not all(k.last_id() >= last for k in sinks):
                await asyncio.sleep(0.1)
    except TimeoutError:
        pass
    complete = sum(1 for k in sinks if k.frames == last - 1 and k.last_id() == last)
    print(json.dumps({"complete": complete}), flush=True)


class Bench:
    """The processes under test and helpers to drive them."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.nats = NatsServerProcess(workdir / "nats")
        self.port = free_port()
        self.prefix = "bench" + uuid.uuid4().hex[:6]
        self.token = issue(SECRET.encode(), "bench")
        self.gateway: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.nats.start()
        env = dict(os.environ)
        env.update(
            AGENTBUS_DEVICE_SECRET=SECRET,
            AGENTBUS_BUS_PREFIX=self.prefix,
            AGENTBUS_GATEWAY_RATE_PER_S="0",
            AGENTBUS_GATEWAY_MAX_STREAMS="0",  # 1,000 clients of one device
            AGENTBUS_GATEWAY_CLIENT_BUFFER="4096",
            AGENTBUS_GATEWAY_LOG_LEVEL="WARNING",
        )
        log = open(self.workdir / "gateway.log", "ab")  # noqa: SIM115
        self.gateway = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.gateway",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--nats",
                self.nats.url,
                "--data-dir",
                str(self.workdir),
            ],
            cwd=Path(__file__).resolve().parents[1],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.nc = await nats.connect(self.nats.url)
        self.log = JetStreamLog(self.nc, BusNames(self.prefix))
        self.http = aiohttp.ClientSession()
        await wait_healthy(self.http, self.url("/healthz"), 30)

    async def stop(self) -> None:
        await self.http.close()
        await self.nc.close()
        if self.gateway is not None:
            self.gateway.terminate()
            self.gateway.wait(30)
        self.nats.stop()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def session(self) -> str:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.http.post(
            self.url("/v1/sessions"), json={}, headers=headers
        ) as r:
            sid: str = (await r.json())["session_id"]
            return sid

    async def fill(self, sid: str, n: int) -> None:
        for i in range(n):
            await self.log.append(
                sid, ToolUpdate(call_id=f"c{i}", text="x" * 64), actor="w"
            )

    async def paced(
        self, sid: str, rate: float, seconds: float, sent: dict[int, float]
    ) -> int:
        """Append at ``rate``/s for ``seconds``; records each seq's send time."""
        loop = asyncio.get_running_loop()
        start, n = loop.time(), int(rate * seconds)
        for i in range(n):
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)  # pacing, not synchronisation
            # The only writer of a fresh session: this event will be seq i + 2.
            # Stamped before the append, since the SSE copy may beat the ack back.
            sent[i + 2] = time.perf_counter()
            stored = await self.log.append(
                sid, ToolUpdate(call_id=f"p{i}", text="x" * 64), actor="w"
            )
            assert stored.seq == i + 2
        return n

    def gateway_usage(self) -> tuple[float, float]:
        """(CPU seconds, RSS MiB) of the gateway process."""
        assert self.gateway is not None
        return process_usage(self.gateway.pid)

    async def latency_1k(self, seconds: float) -> dict[str, Any]:
        sid = await self.session()
        sent: dict[int, float] = {}
        lat: array = array("d")
        proto = SseCounter(sent, lat)
        transport = await open_sse(self.port, sid, self.token, "?after=1", proto)
        await asyncio.sleep(0.2)  # let the stream settle before timing
        n = await self.paced(sid, 1000, seconds, sent)
        proto.expect(n + 1)
        try:
            async with asyncio.timeout(30):
                await proto.reached.wait()
        except TimeoutError:
            print("latency_1k stalled at", proto.last, "of", n + 1, file=sys.stderr)
            print((self.workdir / "gateway.log").read_text()[-3000:], file=sys.stderr)
            raise
        transport.close()
        return {
            "events": n,
            "rate_per_s": 1000,
            "p50_ms": pct(lat, 0.5),
            "p99_ms": pct(lat, 0.99),
            "max_ms": pct(lat, 1.0),
            "gaps": proto.gaps,
        }

    async def fanout(
        self, clients: int, probes: int, rate: float, seconds: float
    ) -> dict[str, Any]:
        """``probes`` clients parse and time every event; the rest only count
        frames, in a second process, so the bench's own CPU pollutes the
        gateway's figures less.
        """
        sid = await self.session()
        sent: dict[int, float] = {}
        lat: array = array("d")
        cpu0, rss0 = self.gateway_usage()
        t_open = time.perf_counter()
        protos = [SseCounter(sent, lat) for _ in range(probes)]
        transports = [
            await open_sse(self.port, sid, self.token, "?after=1", p) for p in protos
        ]
        n = int(rate * seconds)
        worker = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--sink-worker",
            f"{self.port},{sid},{self.token},{clients - probes},{n + 1}",
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert worker.stdout is not None
        assert (await worker.stdout.readline()).strip() == b"ready"
        await asyncio.sleep(1.0)  # all connected and idle
        open_s = time.perf_counter() - t_open
        _, rss_idle = self.gateway_usage()
        cpu1, wall1 = self.gateway_usage()[0], time.perf_counter()
        await self.paced(sid, rate, seconds, sent)
        for p in protos:
            p.expect(n + 1)
        async with asyncio.timeout(60):
            await asyncio.gather(*(p.reached.wait() for p in protos))
        cpu2, rss2 = self.gateway_usage()
        wall2 = time.perf_counter()
        complete = sum(1 for p in protos if p.last == n + 1 and p.gaps == 0)
        report = json.loads(await worker.stdout.readline())
        await worker.wait()
        for t in transports:
            t.close()
        return {
            "clients": clients,
            "probe_clients": probes,
            "rate_per_s": rate,
            "events": n,
            "timed_deliveries": len(lat),
            "clients_complete_in_order": complete + report["complete"],
            "p50_ms": pct(lat, 0.5),
            "p99_ms": pct(lat, 0.99),
            "max_ms": pct(lat, 1.0),
            "gateway_rss_mib": {
                "before": round(rss0, 1),
                "clients_idle": round(rss_idle, 1),
                "after": round(rss2, 1),
            },
            "gateway_cpu_pct": round(100 * (cpu2 - cpu1) / (wall2 - wall1), 1),
            # Load-independent: gateway CPU per (client, event) delivered.
            "gateway_cpu_us_per_delivery": round(
                1e6 * (cpu2 - cpu1) / (n * clients), 2
            ),
            "gateway_cpu_s_connect": round(cpu1 - cpu0, 2),
            "connect_s": round(open_s, 2),
        }

    async def reconnect(
        self, sid: str, head: int, missed: int, runs: int
    ) -> dict[str, Any]:
        """Open a follow stream with ``missed`` events behind: first / last times."""
        firsts, lasts = [], []
        for _ in range(runs):
            proto = SseCounter({}, array("d"))
            proto.expect(head)
            t0 = time.perf_counter()
            transport = await open_sse(
                self.port, sid, self.token, f"?after={head - missed}", proto
            )
            async with asyncio.timeout(30):
                await proto.reached.wait()
            assert (proto.count, proto.gaps) == (missed, 0)
            firsts.append((proto.first_at or 0) - t0)
            lasts.append(proto.last_at - t0)
            transport.close()
        return {
            "missed": missed,
            "runs": runs,
            "first_p50_ms": pct(firsts, 0.5),
            "last_p50_ms": pct(lasts, 0.5),
            "last_p99_ms": pct(lasts, 0.99),
        }

    async def replay(
        self, sid: str, head: int, count: int, runs: int
    ) -> dict[str, Any]:
        times = []
        for _ in range(runs):
            proto = SseCounter({}, array("d"))
            t0 = time.perf_counter()
            await open_sse(
                self.port, sid, self.token, f"?after={head - count}&follow=0", proto
            )
            async with asyncio.timeout(60):
                await proto.closed.wait()
            assert (proto.count, proto.gaps) == (count, 0)
            times.append(proto.last_at - t0)
        best = min(times)
        return {
            "events": count,
            "runs": runs,
            "p50_s": round(statistics.median(times), 4),
            "best_s": round(best, 4),
            "events_per_s": round(count / best),
        }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-sse-") as tmp:
        bench = Bench(Path(tmp))
        await bench.start()
        try:
            out: dict[str, Any] = {
                "bench": "sse",
                "cpus": os.cpu_count(),
                # Other work on the box competes with the gateway: say how much.
                "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
            }
            out["latency_1k"] = await bench.latency_1k(args.latency_seconds)
            out["fanout"] = await bench.fanout(
                args.clients, args.probes, args.fanout_rate, args.fanout_seconds
            )
            small = await bench.session()
            await bench.fill(small, 999)
            out["resume_100"] = await bench.reconnect(small, 1000, 100, 20)
            big = await bench.session()
            t0 = time.perf_counter()
            await bench.fill(big, args.big - 1)
            out["fill_big_s"] = round(time.perf_counter() - t0, 1)
            out["replay_10k"] = await bench.replay(big, args.big, 10_000, 5)
            out["reconnect_100k"] = await bench.reconnect(big, args.big, 100, 20)
            out["reconnect_100k"]["session_events"] = args.big
            out["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
            out["targets"] = {
                "latency_1k_p50_ms": 3,
                "latency_1k_p99_ms": 20,
                "replay_10k_s": 0.5,
                "reconnect_100k_last_ms": 50,
                "concurrent_clients": 1000,
            }
            return out
        finally:
            await bench.stop()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--sink-worker":
        port, sid, token, count, last = sys.argv[2].split(",")
        asyncio.run(sink_worker(int(port), sid, token, int(count), int(last)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=50, help="timed clients")
    parser.add_argument("--fanout-rate", type=float, default=100.0)
    parser.add_argument("--fanout-seconds", type=float, default=10.0)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument(
        "--big", type=int, default=100_000, help="events in the big session"
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args)), indent=2))


if __name__ == "__main__":
    main()
