"""Scale on one machine (issue 15): prints one JSON report.

Starts its own nats-server and gateway process. Sections:
- ``overhead``: ``JetStreamLog`` append and append→tail beside raw nats-py
  (``js.publish``, an ordered consumer) in the same run, as ratios of p50s; SSE
  replay of 10k events (``follow=0``) in events/s beside a raw ordered consumer.
- ``index``: N sessions (default 100k) over 10 devices, written pipelined to the
  log and the index; create p50 over HTTP; paged listing ``?limit=50&cursor=``
  p50 over one device's pages; ``cold_get_100k_ms``: ``GET`` of a session with
  100k events on a gateway whose summary cache holds one session (every sample
  is cold: restarted gateway / another gateway / evicted), from its snapshot.
- ``bounded``: ``read(99000, limit)`` on that session beside the consumer path.
- ``c10k``: see ``bench/scale_c10k.py`` (clients in separate processes).
- ``active``: sessions at work at once on a real ``agentbus up`` (see
  ``bench/scale_active.py``); ``--only active`` runs just that section.

Every figure depends on the machine's load: ``meta.loadavg_1m`` says how much.

    .venv/bin/python bench/scale.py [--sessions N] [--c10k-clients N] ...
    .venv/bin/python bench/scale.py --only active [--active-levels 10,25,50,100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nats
from nats.js.api import StorageType, StreamConfig

from bench.eventlog import (
    RAW_STREAM,
    TEXT,
    bench_append,
    bench_bounded,
    bench_tail,
    dist,
    raw_replay,
    timed,
)
from bench.scale_active import bench_active
from bench.scale_c10k import bench_c10k
from bench.scalelib import Stack, fill_log, fill_sessions, pct, token
from bench.sse import SseCounter, open_sse
from eventstore.log import JetStreamLog
from schemas.events import AgentMessageDelta
from services.common.natsconn import connect_nats


async def overhead(stack: Stack, n: int) -> dict[str, Any]:
    """Our append / tail beside raw nats-py, same server, same run."""
    js = stack.nc.jetstream()
    await js.add_stream(
        StreamConfig(
            name=RAW_STREAM, subjects=["bench.raw.>"], storage=StorageType.FILE
        )
    )
    # Our reader connects as every service does (our client: cheaper headers);
    # the raw one as plain nats-py. Neither reads on the writer's connection.
    reader_nc = await connect_nats(stack.nats.url, "bench-reader")
    raw_reader_nc = await nats.connect(stack.nats.url)
    reader = JetStreamLog(reader_nc, stack.names)
    append = await bench_append(stack.log, js, n)
    append["append_caller_id"] = await append_caller_id(stack.log, n)
    tail = await bench_tail(stack.log, reader, js, raw_reader_nc.jetstream(), n)
    await reader_nc.close()
    await raw_reader_nc.close()
    return {
        "append": append,
        "append_to_tail": tail,
        "append_ratio": round(
            append["jetstreamlog_append"]["p50_ms"]
            / append["raw_js_publish"]["p50_ms"],
            3,
        ),
        "tail_ratio": round(
            tail["jetstreamlog_tail"]["p50_ms"]
            / tail["raw_ordered_consumer"]["p50_ms"],
            3,
        ),
    }


async def append_caller_id(log: JetStreamLog, n: int) -> dict[str, Any]:
    """Appends each with its own caller-given event id (as a prompt with a
    ``client_msg_id``): those claim the id in the id→seq index first."""
    payload = AgentMessageDelta(turn_id="t", text=TEXT)
    count = iter(range(n))

    async def one() -> None:
        await log.append("s_ids", payload, actor="bench", event_id=f"ev_c{next(count)}")

    await log.append("s_ids", payload, actor="bench", event_id="ev_warm")
    lat, rate = await timed(one, n)
    return {**dist(lat), "per_s": round(rate)}


async def sse_replay(stack: Stack, sid: str, device: str, head: int) -> dict[str, Any]:
    """10k events over SSE from a cursor, ``follow=0``: best of 5; raw beside."""
    times, cpus, count = [], [], min(10_000, head - 1)
    for _ in range(5):
        proto = SseCounter({}, array("d"))
        cpu0 = stack.usage()[0]
        t0 = time.perf_counter()
        query = f"?after={head - count}&follow=0"
        await open_sse(stack.port, sid, token(device), query, proto)
        async with asyncio.timeout(120):
            await proto.closed.wait()
        assert (proto.count, proto.gaps) == (count, 0), (proto.count, proto.gaps)
        times.append(proto.last_at - t0)
        cpus.append(stack.usage()[0] - cpu0)
    raw_s = await raw_replay(stack.nc.jetstream(), stack.names.log_session(sid), count)
    return {
        "replay_events": count,
        "replay_best_s": round(min(times), 4),
        "replay_p50_s": round(sorted(times)[2], 4),
        "replay_events_per_s": round(count / min(times)),
        # the gateway's CPU per replayed event (load moves it far less than time)
        "replay_gateway_cpu_us_per_event": round(min(cpus) / count * 1e6, 1),
        "raw_ordered_consumer_events_per_s": round(count / raw_s),
    }


async def timed_create(stack: Stack, device: str, n: int) -> list[float]:
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        status, _ = await stack.call("POST", "/v1/sessions", device)
        lat.append((time.perf_counter() - t0) * 1000)
        assert status == 201
    return lat


async def listing(stack: Stack, device: str, pages: int) -> dict[str, Any]:
    """The first page (loads the device), then ``pages`` pages by cursor, twice."""
    t0 = time.perf_counter()
    status, body = await stack.call("GET", "/v1/sessions?limit=50", device)
    first = (time.perf_counter() - t0) * 1000
    assert status == 200, body
    assert len(body["sessions"]) == 50, body
    lat, seen, passes = [], 0, []
    for _ in range(2):  # the first pass folds each session; the second is warm
        query = "limit=50"
        passes.append(len(lat))
        for _ in range(pages):
            t1 = time.perf_counter()
            status, body = await stack.call("GET", f"/v1/sessions?{query}", device)
            lat.append((time.perf_counter() - t1) * 1000)
            assert status == 200, body
            seen += len(body["sessions"])
            more = body.get("next_cursor")  # at the end: from the top again
            query = f"limit=50&cursor={more}" if more else "limit=50"
    return {
        "page_size": 50,
        "first_page_load_ms": round(first, 2),
        "pages_timed": len(lat),
        "list_p50_ms": pct(lat, 0.5),
        "list_p99_ms": pct(lat, 0.99),
        "list_first_pass_p50_ms": pct(lat[: passes[1]], 0.5),
        "list_warm_pass_p50_ms": pct(lat[passes[1] :], 0.5),
        "sessions_seen": seen,
    }


async def cold_gets(
    stack: Stack, sid: str, other: str, device: str, runs: int
) -> list[float]:
    """``GET sid`` right after ``GET other`` on a gateway caching one summary."""
    lat = []
    for _ in range(runs):
        await stack.call("GET", f"/v1/sessions/{other}", "dev0")
        t0 = time.perf_counter()
        status, body = await stack.call("GET", f"/v1/sessions/{sid}", device)
        lat.append((time.perf_counter() - t0) * 1000)
        assert status == 200, body
    return lat


async def index(stack: Stack, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    devices = [f"dev{i}" for i in range(args.devices)]
    t0 = time.perf_counter()
    sids = await fill_sessions(stack, args.sessions, devices, "i")
    out: dict[str, Any] = {"sessions": args.sessions, "devices": args.devices,
                           "fill_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
    create = await timed_create(stack, "dev0", 200)
    out["create_p50_ms"] = pct(create, 0.5)
    out["create_p99_ms"] = pct(create, 0.99)
    out.update(await listing(stack, "dev1", 40))
    # One session with 100k events.
    status, body = await stack.call("POST", "/v1/sessions", "big")
    big = body["session_id"]
    t1 = time.perf_counter()
    await fill_log(stack, big, args.big)
    out["fill_big_s"] = round(time.perf_counter() - t1, 1)
    t2 = time.perf_counter()
    status, body = await stack.call("GET", f"/v1/sessions/{big}", "big")
    assert status == 200, body
    assert body["last_seq"] == args.big, body
    out["first_get_100k_ms"] = round((time.perf_counter() - t2) * 1000, 1)
    await stack.restart_gateway(AGENTBUS_GATEWAY_SUMMARY_CACHE="1")
    cold = await cold_gets(stack, big, sids[0], "big", 20)
    out["cold_get_100k_ms"] = pct(cold, 0.5)
    out["cold_get_100k_p99_ms"] = pct(cold, 0.99)
    # Worst case between snapshots: 999 events after the last one.
    await fill_log(stack, big, args.big + 999)
    behind = await cold_gets(stack, big, sids[0], "big", 10)
    out["cold_get_100k_999_behind_ms"] = pct(behind, 0.5)
    await stack.restart_gateway()
    return out, big


def progress(report: dict[str, Any]) -> None:
    """The sections so far, on stderr (a later section failing loses nothing)."""
    print(json.dumps(report), file=sys.stderr, flush=True)


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    stack = Stack(workdir)
    try:
        await stack.start()
        report: dict[str, Any] = {"overhead": await overhead(stack, args.appends)}
        if args.only == "overhead":
            return report
        report["index"], big = await index(stack, args)
        progress(report)
        head = args.big + 999
        report["overhead"].update(await sse_replay(stack, big, "big", head))
        report["bounded"] = await bench_bounded(stack.log, big, args.big, 20)
        progress(report)
        if args.c10k_clients:
            report["c10k"] = await bench_c10k(stack, args)
        return report
    finally:
        await stack.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--appends", type=int, default=2000)
    p.add_argument("--sessions", type=int, default=100_000)
    p.add_argument("--devices", type=int, default=10)
    p.add_argument("--big", type=int, default=100_000)
    p.add_argument("--c10k-clients", type=int, default=10_000)
    p.add_argument("--c10k-sessions", type=int, default=1_000)
    p.add_argument("--c10k-seconds", type=int, default=30)
    p.add_argument("--c10k-procs", type=int, default=4)
    p.add_argument("--active-levels", default="5,10,25,50,100")
    p.add_argument("--active-s", type=float, default=30.0)
    p.add_argument("--active-stop-ms", type=float, default=400.0)
    p.add_argument("--only", choices=["active", "overhead"], help="one section")
    args = p.parse_args(argv)
    started, load0 = time.perf_counter(), os.getloadavg()[0]
    report: dict[str, Any] = {}
    if args.only != "active":
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
            report = asyncio.run(run(args, Path(tmp)))
    if args.only in (None, "active") and args.active_levels:
        report["active"] = asyncio.run(bench_active(args))
    report["meta"] = {
        "runtime_s": round(time.perf_counter() - started, 1),
        "cpus": os.cpu_count(),
        "loadavg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "args": vars(args),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
