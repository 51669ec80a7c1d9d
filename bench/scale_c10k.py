"""c10k: many SSE clients on one gateway, in client processes of their own.

``clients`` connections over ``sessions`` sessions (10 per session by default),
each following from ``after=1``; the bench appends one event per session per
second for ``seconds`` s. Each event carries its send time (wall clock, same
machine), so a client process times every delivery itself. A client is
complete when it got seq 2..seconds+1, each once and in order.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scalelib import Stack, fill_sessions, pct, token
from bench.sse import _request
from schemas.events import ToolUpdate
from services.common.limits import raise_nofile

FRAME = re.compile(rb'id: (\d+)\n[^\n]*\ndata: [^\n]*?"text":"(\d+\.\d+)"')


class Client(asyncio.Protocol):
    """Counts frames, checks their order, times each by the stamp it carries."""

    def __init__(self, latencies: list[float]) -> None:
        self.latencies = latencies
        self.buf = b""
        self.last = 1
        self.count = 0
        self.gaps = 0
        self.closed = False

    def data_received(self, data: bytes) -> None:
        now = time.time()
        buf = self.buf + data
        cut = buf.rfind(b"\n\n") + 2 if b"\n\n" in buf else 0
        for match in FRAME.finditer(buf, 0, cut):
            seq = int(match.group(1))
            if seq != self.last + 1:
                self.gaps += 1
            self.last, self.count = seq, self.count + 1
            self.latencies.append((now - float(match.group(2))) * 1000)
        self.buf = buf[cut:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True


async def worker(
    port: int, tok: str, sids: list[str], expected: int, wait_s: float, out: Path
) -> None:
    """Run this process's clients; print ``ready``, then the JSON result."""
    raise_nofile()
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    clients: list[Client] = []
    failed = 0
    for i in range(0, len(sids), 100):
        batch = [Client(latencies) for _ in sids[i : i + 100]]
        opened = await asyncio.gather(
            *(loop.create_connection(lambda c=c: c, "127.0.0.1", port) for c in batch),
            return_exceptions=True,
        )
        for client, sid, result in zip(batch, sids[i : i + 100], opened, strict=True):
            if isinstance(result, BaseException):
                failed += 1
                continue
            result[0].write(_request(sid, tok, "?after=1"))
            clients.append(client)
    print("ready", flush=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not all(
        c.last >= expected or c.closed for c in clients
    ):
        await asyncio.sleep(0.2)  # polling the clients' progress
    ok = sum(
        1
        for c in clients
        if c.last == expected and c.gaps == 0 and c.count == expected - 1
    )
    result = {"complete": ok, "failed": failed, "clients": len(clients)}
    result["latencies"] = [round(x, 1) for x in latencies]
    out.write_text(json.dumps(result))  # megabytes: a file, not a pipe line
    print("done", flush=True)


async def append_rounds(stack: Stack, sids: list[str], seconds: int) -> float:
    """One event per session per second, spread evenly; the seconds it took."""
    loop = asyncio.get_running_loop()
    rate = len(sids)
    gate = asyncio.Semaphore(256)
    tasks = []

    async def one(sid: str) -> None:
        async with gate:
            await stack.log.append(
                sid, ToolUpdate(call_id="p", text=f"{time.time():.6f}"), actor="w"
            )

    start = loop.time()
    for i in range(seconds * rate):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing, not synchronisation
        tasks.append(asyncio.create_task(one(sids[i % rate])))
    await asyncio.gather(*tasks)
    return loop.time() - start


async def bench_c10k(stack: Stack, args: Any) -> dict[str, Any]:
    n, procs, seconds = args.c10k_clients, args.c10k_procs, args.c10k_seconds
    sids = await fill_sessions(stack, args.c10k_sessions, ["c10k"], "c")
    targets = [sids[i % len(sids)] for i in range(n)]
    cpu0, rss0 = stack.usage()
    t0 = time.perf_counter()
    workers = []
    for k in range(procs):
        part = targets[k::procs]
        path = stack.workdir / f"c10k-{k}.json"
        path.write_text(json.dumps(part))
        workers.append(await asyncio.create_subprocess_exec(
            sys.executable, __file__, str(stack.port), token("c10k"), str(path),
            str(seconds + 1), str(seconds + 120), stdout=asyncio.subprocess.PIPE,
        ))  # fmt: skip
    for w in workers:
        assert w.stdout is not None
        assert (await w.stdout.readline()).strip() == b"ready"
    connect_s = time.perf_counter() - t0
    await asyncio.sleep(2.0)  # let every stream reach live before measuring idle
    cpu1, rss_idle = stack.usage()
    took = await append_rounds(stack, sids, seconds)
    results = []
    for k, w in enumerate(workers):
        assert w.stdout is not None
        assert (await w.stdout.readline()).strip() == b"done"
        await w.wait()
        results.append(json.loads((stack.workdir / f"c10k-{k}.out").read_text()))
    cpu2, rss_end = stack.usage()
    lat = [x for r in results for x in r["latencies"]]
    return {
        "clients": n,
        "sessions": len(sids),
        "client_procs": procs,
        "seconds": seconds,
        "append_rounds_s": round(took, 1),
        "connected": sum(r["clients"] for r in results),
        "connect_failed": sum(r["failed"] for r in results),
        "connect_s": round(connect_s, 1),
        "complete_in_order": sum(r["complete"] for r in results),
        "deliveries": len(lat),
        "p50_ms": pct(lat, 0.5),
        "p99_ms": pct(lat, 0.99),
        "max_ms": pct(lat, 1.0),
        "rss_mib": round(rss_end, 1),
        "rss_mib_before": round(rss0, 1),
        "rss_mib_idle_connected": round(rss_idle, 1),
        "gateway_cpu_s": {
            "connect": round(cpu1 - cpu0, 1),
            "run": round(cpu2 - cpu1, 1),
        },
    }


if __name__ == "__main__":
    port_, tok_, path_, expected_, wait_ = sys.argv[1:6]
    asyncio.run(
        worker(int(port_), tok_, json.loads(Path(path_).read_text()), int(expected_),
               float(wait_), Path(path_).with_suffix(".out"))
    )  # fmt: skip
