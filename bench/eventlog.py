"""Session-log benchmark: ``JetStreamLog`` beside raw nats-py, same server, same run.

Prints JSON: append latency p50/p99 and throughput; append → ``tail`` consumer
latency at a paced 1k events/s; replay of 10k events; reconnect to a 100k-event
session with 100 missed (time to first/last event via ``tail``); the projector's
copy rate and a 10k replay served from SQLite after retention. Each section
carries the raw ``js.publish`` / ordered-consumer figure measured beside it and
the design §7 target; ``reconnect.bounded_read`` sets ``read(after, limit)``
(one batched direct get) beside the consumer path it replaced. Usage:

    .venv/bin/python bench/eventlog.py [--appends N] [--paced N] [--big N]

It starts its own nats-server on a free port with a temporary store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eventstore.chain import digest
from eventstore.log import JetStreamLog, log_headers
from eventstore.projection import SqliteProjection
from eventstore.projector import Projector
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.codec import encode_event
from schemas.events import AgentMessageDelta, Event
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess

TEXT = "x" * 200  # a coalesced delta of a few dozen tokens (~300 B envelope)
RAW_STREAM = "BENCH_RAW"


def pct(samples: list[float], q: float) -> float:
    """The q-quantile (0..1) of samples, in the samples' unit, rounded."""
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def dist(samples_ms: list[float]) -> dict[str, float]:
    """p50/p99/max in milliseconds."""
    return {
        "p50_ms": pct(samples_ms, 0.5),
        "p99_ms": pct(samples_ms, 0.99),
        "max_ms": round(max(samples_ms), 3),
    }


async def timed(fn: Callable[[], Awaitable[Any]], n: int) -> tuple[list[float], float]:
    """Call ``fn`` n times in sequence: per-call ms, and calls per second."""
    lat: list[float] = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        lat.append((time.perf_counter() - t0) * 1000)
    return lat, n / (time.perf_counter() - start)


async def bench_append(log: JetStreamLog, js: Any, n: int) -> dict[str, Any]:
    """Sequential appends to one session vs raw ``js.publish`` of the same bytes,
    call by call in turn: both under the same load, caches and stream growth
    (run one after the other, whichever went first paid the warm-up)."""
    payload = AgentMessageDelta(turn_id="t", text=TEXT)
    await log.append("s_append", payload, actor="bench")  # warm the head
    sample = (await log.read("s_append", 0, 1))[0].raw
    ours_lat: list[float] = []
    raw_lat: list[float] = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        await log.append("s_append", payload, actor="bench")
        t1 = time.perf_counter()
        await js.publish("bench.raw.append", sample)
        ours_lat.append((t1 - t0) * 1000)
        raw_lat.append((time.perf_counter() - t1) * 1000)
    wall = time.perf_counter() - start
    return {
        "n": n,
        "bytes": len(sample),
        "interleaved": True,
        "jetstreamlog_append": {**dist(ours_lat), "per_s": _rate(ours_lat)},
        "raw_js_publish": {**dist(raw_lat), "per_s": _rate(raw_lat)},
        "wall_s": round(wall, 3),
    }


def _rate(lat_ms: list[float]) -> int:
    """Calls per second of busy time."""
    return round(len(lat_ms) / sum(lat_ms) * 1000)


async def paced(n: int, rate: float, send: Callable[[int], Awaitable[None]]) -> None:
    """Call ``send(i)`` at ``rate`` per second (open loop, no catch-up bursts)."""
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await send(i)


async def bench_tail(
    log: JetStreamLog, reader: JetStreamLog, js: Any, raw_reader: Any, n: int
) -> dict[str, Any]:
    """Append → tail latency at 1k events/s, vs raw publish → ordered consumer.

    Both flows run at once, sends alternating (each at 1k/s, 0.5 ms apart),
    so both see the same load; the raw one publishes the same event bytes.
    Each reader has its own connection, as a gateway's has from the pool's
    writer (on the writer's own connection an ack and a delivery can share
    one socket read, a shortcut no deployment has).
    """
    payload = AgentMessageDelta(turn_id="t", text=TEXT)
    await log.append("s_tail", payload, actor="bench")
    sample = (await log.read("s_tail", 0, 1))[0].raw
    ours_sent: dict[int, float] = {}
    raw_sent: list[float] = []
    ours_lat: list[float] = []
    raw_lat: list[float] = []
    done = asyncio.Event()

    def check_done() -> None:
        if len(ours_lat) == n and len(raw_lat) == n:
            done.set()

    async def follow() -> None:
        async for stored in reader.tail("s_tail", after=1):
            ours_lat.append((time.perf_counter() - ours_sent[stored.seq]) * 1000)
            check_done()
            if len(ours_lat) == n:
                return

    async def got(msg: Msg) -> None:
        # An ordered consumer delivers in publish order: the k-th is the k-th sent.
        raw_lat.append((time.perf_counter() - raw_sent[len(raw_lat)]) * 1000)
        check_done()

    sub = await raw_reader.subscribe(
        "bench.raw.tail",
        cb=got,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
    )
    task = asyncio.create_task(follow())

    async def send(i: int) -> None:
        if i % 2 == 0:
            ours_sent[i // 2 + 2] = time.perf_counter()
            await log.append("s_tail", payload, actor="bench")
        else:
            raw_sent.append(time.perf_counter())
            await js.publish("bench.raw.tail", sample)

    await paced(2 * n, 2000, send)
    await asyncio.wait_for(done.wait(), 30)
    await task
    await sub.unsubscribe()
    return {
        "n": n,
        "rate_per_s": 1000,
        "interleaved": True,
        "bytes": len(sample),
        "jetstreamlog_tail": dist(ours_lat),
        "raw_ordered_consumer": dist(raw_lat),
        "target": {"p50_ms": 3, "p99_ms": 20},
    }


async def build(js: Any, names: BusNames, sid: str, n: int) -> None:
    """Write a well-formed n-event log fast (pipelined), as the append path would."""
    prev = None
    for seq in range(1, n + 1):
        raw = encode_event(
            Event(
                session_id=sid,
                seq=seq,
                id=f"ev_{sid}_{seq}",
                type=AgentMessageDelta.TYPE,
                ts="2026-11-29T00:00:00.000000Z",
                actor="bench",
                data=AgentMessageDelta(turn_id="t", text=TEXT),
                prev=prev,
            )
        )
        prev = digest(raw)
        await js.publish_async(
            names.log_subject(sid, seq, AgentMessageDelta.TYPE),
            raw,
            headers=log_headers(
                names, sid, seq, AgentMessageDelta.TYPE, f"ev_{sid}_{seq}"
            ),
        )
    await js.publish_async_completed()


async def first_and_last(
    reader: JetStreamLog, sid: str, after: int, count: int
) -> tuple[float, float]:
    """Time from calling ``tail`` to the first and to the ``count``-th event."""
    t0 = time.perf_counter()
    first = 0.0
    got = 0
    async with contextlib.aclosing(reader.tail(sid, after)) as events:
        async for _ in events:
            got += 1
            if got == 1:
                first = time.perf_counter() - t0
            if got == count:
                return first * 1000, (time.perf_counter() - t0) * 1000
    raise AssertionError("tail ended")


async def bench_replay(
    reader: JetStreamLog, js: Any, names: BusNames, n: int
) -> dict[str, Any]:
    """Replay a 10k-event session: ``read`` and ``tail``; raw ordered consumer."""
    await build(js, names, "s_replay", n)
    t0 = time.perf_counter()
    events = await reader.read("s_replay", 0)
    read_s = time.perf_counter() - t0
    assert len(events) == n, len(events)
    _, tail_ms = await first_and_last(reader, "s_replay", 0, n)
    return {
        "n": n,
        "jetstreamlog_read_s": round(read_s, 4),
        "jetstreamlog_tail_s": round(tail_ms / 1000, 4),
        "raw_ordered_consumer_s": round(
            await raw_replay(js, names.log_session("s_replay"), n), 4
        ),
        "target_s": 0.5,
    }


async def raw_replay(js: Any, subject: str, n: int) -> float:
    """Seconds for a raw ordered consumer to deliver ``n`` messages of ``subject``."""
    got = 0
    done = asyncio.Event()

    async def cb(msg: Msg) -> None:
        nonlocal got
        got += 1
        if got == n:
            done.set()

    t0 = time.perf_counter()
    sub = await js.subscribe(subject, cb=cb, ordered_consumer=True)
    await asyncio.wait_for(done.wait(), 60)
    elapsed = time.perf_counter() - t0
    await sub.unsubscribe()
    return elapsed


async def bench_reconnect(
    reader: JetStreamLog, js: Any, names: BusNames, n: int, rounds: int
) -> dict[str, Any]:
    """A client 100 events behind on an n-event session: first and last via tail."""
    t0 = time.perf_counter()
    await build(js, names, "s_big", n)
    build_s = time.perf_counter() - t0
    firsts, lasts = [], []
    for _ in range(rounds):
        first, last = await first_and_last(reader, "s_big", n - 100, 100)
        firsts.append(first)
        lasts.append(last)
    reads = []
    for _ in range(rounds):
        t1 = time.perf_counter()
        assert len(await reader.read("s_big", n - 100)) == 100
        reads.append((time.perf_counter() - t1) * 1000)
    bounded = await bench_bounded(reader, "s_big", n, rounds)
    return {
        "bounded_read": bounded,
        "session_events": n,
        "missed": 100,
        "rounds": rounds,
        "build_s": round(build_s, 2),
        "tail_first_event": dist(firsts),
        "tail_last_event": dist(lasts),
        "read_100": dist(reads),
        "target_last_event_ms": 50,
    }


async def bench_bounded(
    reader: JetStreamLog, sid: str, n: int, rounds: int
) -> dict[str, Any]:
    """``read(n - 1000, limit)``: the batched direct get beside the consumer path.

    The consumer path is the engine ``read`` used for every read before
    (``Replayer.replay``), measured in the same run on the same session; above
    ``BATCH_MAX`` (16) ``read`` takes the consumer path itself.
    """
    after = n - 1000
    out: dict[str, Any] = {"after": after}
    for limit in (1, 10, 100):
        # Separate loops: a consumer path leaves deliveries in flight for a while.
        ours = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            got = await reader.read(sid, after, limit)
            ours.append((time.perf_counter() - t0) * 1000)
            assert len(got) == limit
        consumer = []
        for _ in range(rounds):
            t1 = time.perf_counter()
            old = [e async for e in reader._replayer.replay(sid, after, after + limit)]
            consumer.append((time.perf_counter() - t1) * 1000)
            assert old == got
        out[f"limit_{limit}_ms"] = dist(ours)
        out[f"limit_{limit}_consumer_path_ms"] = dist(consumer)
    return out


async def bench_projector(
    nc: Client, reader: JetStreamLog, names: BusNames, db: Path, n_replay: int
) -> dict[str, Any]:
    """Copy the whole stream into SQLite; then replay a purged session from it."""
    js = nc.jetstream()
    write = await SqliteProjection.open(db)
    read = await SqliteProjection.open(db, readonly=True)
    projector = Projector(nc, write, read, names, batch=256)
    sub = await nc.subscribe(names.projector_read, cb=projector.serve)
    try:
        await projector.prepare()
        last = (await js.stream_info(names.log_stream)).state.last_seq
        t0 = time.perf_counter()
        while await write.position(names.log_stream) < last:
            await projector.step(wait_s=0.5)
        copy_s = time.perf_counter() - t0
        # Retention now drops everything but the newest 1000 messages.
        tight = EventStoreSettings(bus_prefix=names.prefix, log_max_msgs=1000)
        await ensure_log_stream(js, names, tight)
        t1 = time.perf_counter()
        events = await reader.read("s_replay", 0)
        replay_s = time.perf_counter() - t1
        assert len(events) == n_replay, len(events)
    finally:
        await sub.unsubscribe()
        await projector.close()
        await read.close()
        await write.close()
    return {
        "copied": last,
        "copy_per_s": round(last / copy_s),
        "replay_10k_from_projector_s": round(replay_s, 4),
    }


async def run(args: argparse.Namespace, store: Path) -> dict[str, Any]:
    """Start the server, run every section, stop the server."""
    server = NatsServerProcess(store)
    await server.astart()
    try:
        writer_nc: Client = await nats.connect(server.url)
        reader_nc: Client = await nats.connect(server.url)
        names = BusNames("bench")
        js = writer_nc.jetstream()
        await ensure_log_stream(js, names, EventStoreSettings(bus_prefix="bench"))
        await js.add_stream(
            StreamConfig(
                name=RAW_STREAM, subjects=["bench.raw.>"], storage=StorageType.FILE
            )
        )
        log, reader = JetStreamLog(writer_nc, names), JetStreamLog(reader_nc, names)
        report = {
            "append": await bench_append(log, js, args.appends),
            "append_to_tail": await bench_tail(
                log, reader, js, reader_nc.jetstream(), args.paced
            ),
            "replay": await bench_replay(reader, js, names, 10_000),
            "reconnect": await bench_reconnect(reader, js, names, args.big, 20),
            "projector": await bench_projector(
                writer_nc, reader, names, store.parent / "projection.db", 10_000
            ),
        }
        await writer_nc.close()
        await reader_nc.close()
        return report
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON report."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--appends", type=int, default=3000)
    p.add_argument("--paced", type=int, default=3000)
    p.add_argument("--big", type=int, default=100_000)
    args = p.parse_args(argv)
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        report = asyncio.run(run(args, Path(tmp) / "nats"))
    report["meta"] = {
        "runtime_s": round(time.perf_counter() - started, 1),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        # Other work on the machine skews every figure (raw ones too).
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
