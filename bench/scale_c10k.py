"""c10k: many SSE clients on one gateway, in client processes of their own.

``clients`` connections over ``sessions`` sessions (10 per session by default),
each following from ``after=1``; the bench appends one event per session per
second for ``seconds`` s. Each event carries its send time (wall clock, same
machine), so a client process times every delivery itself. A client is
complete when it got seq 2..seconds+1, each once and in order, on a 200.

The clients are raw sockets under one ``epoll`` per process (no asyncio, no
HTTP library): the bench should measure the gateway, not itself. Each process
reports its own CPU time, so gateway and client CPU are given apart.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import socket
import sys
import time
from array import array
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scalelib import Stack, fill_sessions, pct, token
from bench.sse import _request
from schemas.events import ToolUpdate
from services.common.limits import raise_nofile

FRAME = re.compile(rb'id: (\d+)\n[^\n]*\ndata: [^\n]*?"text":"(\d+\.\d+)"')


class Client:
    """One raw-socket SSE client: checks the status, counts frames in order, and
    times each by the stamp it carries."""

    __slots__ = ("buf", "closed", "count", "gaps", "last", "sock", "status")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.last = 1
        self.count = 0
        self.gaps = 0
        self.closed = False
        self.status = 0  # HTTP status once the head is in

    def feed(self, data: bytes, now: float, latencies: array[float]) -> None:
        buf = self.buf + data
        if not self.status:
            if b"\r\n" not in buf:
                self.buf = buf
                return
            self.status = int(buf.split(b" ", 2)[1])
        cut = buf.rfind(b"\n\n") + 2 if b"\n\n" in buf else 0
        for match in FRAME.finditer(buf, 0, cut):
            seq = int(match.group(1))
            if seq != self.last + 1:
                self.gaps += 1
            self.last, self.count = seq, self.count + 1
            latencies.append((now - float(match.group(2))) * 1000)
        self.buf = buf[cut:]


def open_clients(
    port: int, tok: str, sids: list[str], ep: select.epoll
) -> list[Client]:
    """Connect and send every request (blocking connects: loopback, a few ms)."""
    clients = []
    for sid in sids:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(_request(sid, tok, "?after=1"))
        sock.setblocking(False)
        ep.register(sock.fileno(), select.EPOLLIN)
        clients.append(Client(sock))
    return clients


def pump(ep: select.epoll, by_fd: dict[int, Client], lat: array[float]) -> None:
    """Read whatever arrived (one epoll wait of at most 0.2 s)."""
    for fd, _ in ep.poll(0.2):
        client = by_fd[fd]
        try:
            data = client.sock.recv(1 << 16)
        except BlockingIOError:
            continue
        if not data:
            client.closed = True
            ep.unregister(fd)
            continue
        client.feed(data, time.time(), lat)


def worker(
    port: int, tok: str, sids: list[str], expected: int, wait_s: float, out: Path
) -> None:
    """Run this process's clients (epoll, no asyncio: the bench must stay cheap);
    print ``ready``, then the JSON result with this process's own CPU time."""
    raise_nofile()
    ep = select.epoll()
    lat: array[float] = array("d")
    clients = open_clients(port, tok, sids, ep)
    by_fd = {c.sock.fileno(): c for c in clients}
    print("ready", flush=True)
    cpu0 = time.process_time()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not all(
        c.last >= expected or c.closed for c in clients
    ):
        pump(ep, by_fd, lat)
    ok = sum(
        1
        for c in clients
        if c.status == 200 and c.last == expected and c.gaps == 0
        and c.count == expected - 1
    )  # fmt: skip
    result: dict[str, Any] = {
        "complete": ok,
        "refused": sum(1 for c in clients if c.status not in (0, 200)),
        "statuses": dict(Counter(str(c.status) for c in clients if c.status != 200)),
        "clients": len(clients),
        "cpu_s": round(time.process_time() - cpu0, 2),
        "latencies": [round(x, 1) for x in lat],
    }
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
    load = os.getloadavg()[0]
    lat = [x for r in results for x in r["latencies"]]
    return {
        "clients": n,
        "sessions": len(sids),
        "client_procs": procs,
        "seconds": seconds,
        "append_rounds_s": round(took, 1),
        "connected": sum(r["clients"] for r in results),
        "refused": sum(r["refused"] for r in results),
        "refused_by_status": dict(
            sum((Counter(r["statuses"]) for r in results), Counter())
        ),
        "connect_s": round(connect_s, 1),
        "complete_in_order": sum(r["complete"] for r in results),
        "deliveries": len(lat),
        "p50_ms": pct(lat, 0.5),
        "p99_ms": pct(lat, 0.99),
        "max_ms": pct(lat, 1.0),
        "rss_mib": round(rss_end, 1),
        "loadavg_1m_after": round(load, 2),
        "rss_mib_before": round(rss0, 1),
        "rss_mib_idle_connected": round(rss_idle, 1),
        "gateway_cpu_s": {
            "connect": round(cpu1 - cpu0, 1),
            "run": round(cpu2 - cpu1, 1),
        },
        # the bench's own client processes over the same run (not the gateway)
        "clients_cpu_s_run": round(sum(r["cpu_s"] for r in results), 1),
    }


if __name__ == "__main__":
    port_, tok_, path_, expected_, wait_ = sys.argv[1:6]
    worker(int(port_), tok_, json.loads(Path(path_).read_text()), int(expected_),
           float(wait_), Path(path_).with_suffix(".out"))  # fmt: skip
