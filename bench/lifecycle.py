"""Broker lifecycle benchmark on the local sandbox host.

Measures (ms, p50 and max over repetitions): bind of a running sandbox, lazy
create (first bind), pause, resume (bind of a paused sandbox), full archive of
a 10 MiB / 1,000-file workspace, its incremental re-archive after one change,
and restore of that archive into a fresh sandbox; and on the sandbox host
itself (bench/sandbox_snapshots.py): create, pause, resume, snapshot, create
from a snapshot and fork on the same workspace, and create from a non-default
template. Prints JSON. Usage:

    .venv/bin/python bench/lifecycle.py [--repeat N]

Starts its own nats-server and sandbox host on free ports.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import secrets
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sandbox_snapshots import host_bench
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.broker import Assignment
from schemas.names import BusNames
from services.broker.client import bind
from services.broker.service import Broker, assignments_bucket
from services.broker.settings import BrokerSettings
from services.common.natsserver import NatsServerProcess
from tests.plugins.sandboxhost import SandboxHostProcess

FILL = (
    "mkdir -p /workspace/data && cd /workspace/data && "
    "for d in 0 1 2 3 4 5 6 7 8 9; do mkdir -p d$d; done && "
    "for i in $(seq 1 1000); do head -c 10485 /dev/urandom > d$((i % 10))/f$i; done"
)


def summary(samples: list[float]) -> dict[str, float]:
    """p50 and max in milliseconds."""
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "max_ms": round(max(samples), 2),
        "n": len(samples),
    }


async def timed(coro: Any) -> tuple[float, Any]:
    """(elapsed ms, result)."""
    t0 = time.perf_counter()
    result = await coro
    return (time.perf_counter() - t0) * 1000, result


class Bench:
    """One broker replica plus the pool's part (assignments)."""

    def __init__(self, broker: Broker, nc: Any, names: BusNames) -> None:
        self.broker = broker
        self.nc = nc
        self.names = names

    async def assign(self, worker: str, session: str) -> str:
        """Write an assignment; returns its one-time token."""
        kv = await assignments_bucket(self.nc.jetstream(), self.names)
        token = secrets.token_urlsafe(16)
        rec = Assignment(
            worker_id=worker,
            session_id=session,
            token_sha256=hashlib.sha256(token.encode()).hexdigest(),
            assigned_at="2026-01-01T00:00:00Z",
        )
        await kv.put(worker, msgspec.json.encode(rec))
        return token

    async def lifecycle(self, repeat: int) -> dict[str, Any]:
        """create, bind (running), pause, resume."""
        out: dict[str, list[float]] = {"create": [], "bind_running": [], "pause": []}
        out["resume"] = []
        for i in range(repeat):
            sid, worker = f"lc{i}", f"w{i}"
            token = await self.assign(worker, sid)
            ms, grant = await timed(bind(self.nc, self.names, worker, token))
            out["create"].append(ms)
            for _ in range(5):
                ms, grant = await timed(
                    bind(self.nc, self.names, worker, grant.next_token)
                )
                out["bind_running"].append(ms)
            ms, _ = await timed(self.broker.reaper.pause(sid, "bench"))
            out["pause"].append(ms)
            ms, grant = await timed(bind(self.nc, self.names, worker, grant.next_token))
            out["resume"].append(ms)
        return {k: summary(v) for k, v in out.items()}

    async def archives(self, repeat: int) -> dict[str, Any]:
        """Full archive, incremental re-archive after one change, restore."""
        life, reaper = self.broker.life, self.broker.reaper
        token = await self.assign("wa", "arch")
        await bind(self.nc, self.names, "wa", token)
        rec = (await life.store.get("arch")).record
        envd = life.envd(rec)
        filled = await envd.run(FILL, timeout_s=600)
        assert filled.exit_code == 0, filled.stderr
        ms_full, manifest = await timed(reaper.save("arch"))
        incr: list[float] = []
        for i in range(repeat):
            await envd.write_bytes("/workspace/data/d0/f10", f"change {i}".encode())
            ms, manifest = await timed(reaper.save("arch"))
            incr.append(ms)
        restore: list[float] = []
        for i in range(repeat):
            conn = await life.provider.create(
                {"bench": "restore"}, f"restore-{i}-{secrets.token_hex(4)}"
            )
            ms, _ = await timed(life.workspace.restore(life.link_of(conn), manifest))  # type: ignore[union-attr]
            restore.append(ms)
            await life.provider.kill(conn.sandbox_id)
        return {
            "workspace": {"files": 1000, "bytes": 1000 * 10485},
            "archive_full": summary([ms_full]),
            "archive_incremental_one_change": summary(incr),
            "restore": summary(restore),
        }


async def main(repeat: int) -> dict[str, Any]:
    """Run everything against private servers."""
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServerProcess(Path(tmp) / "nats")
        server.start()
        host = SandboxHostProcess(Path(tmp) / "host")
        host.start()
        try:
            return await _run(server.url, host, repeat)
        finally:
            host.stop()
            server.stop()


async def _run(url: str, host: SandboxHostProcess, repeat: int) -> dict[str, Any]:
    names = BusNames("bench" + secrets.token_hex(3))
    settings = msgspec.convert(
        {
            "bus_prefix": names.prefix,
            "sandboxhost_url": host.url,
            "sandboxhost_api_key": host.api_key,
        },
        BrokerSettings,
    )
    nc = await nats.connect(url)
    await ensure_log_stream(nc.jetstream(), names, EventStoreSettings())
    async with AsyncExitStack() as stack, aiohttp.ClientSession() as http:
        broker = Broker(settings, nc, http)
        await broker.open(stack)
        await broker.subscribe(stack)
        bench = Bench(broker, nc, names)
        result = {"lifecycle": await bench.lifecycle(repeat)}
        result["archive"] = await bench.archives(repeat)
        for info in await broker.life.provider.list():
            await broker.life.provider.kill(info.sandbox_id)
    await nc.close()
    sandbox = await host_bench(host, repeat)
    result["sandboxhost"] = {k: summary(v) for k, v in sandbox["samples"].items()}
    result["sandboxhost"]["template_first_create_ms"] = round(
        sandbox["template_first_create_ms"], 1
    )
    result["sandboxhost"]["snapshots"] = sandbox["snapshots"]
    result["host"] = host.info().get("isolation", "unknown")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.repeat)), indent=2))
