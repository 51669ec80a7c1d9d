"""Broker faults answered, not waited out: seconds from a fault to the answer.

* ``kill_mid_create``: a bind whose create is in flight on an ``agentbus
  broker`` process that is SIGKILLed; another replica (default settings: op
  lease 6 s renewed every 2 s, silence 3 s) must answer it. Measured: SIGKILL →
  grant (before: the 60 s request timeout, then the 60 s claim lease).
* ``no_broker_then_one``: a bind made while no replica runs; one starts 1 s
  later. Measured: replica subscribed → grant.

Prints JSON. Usage: ``.venv/bin/python bench/broker_faults.py [--repeat N]``.
Starts its own nats-server and sandbox host on free ports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import subprocess
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

from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.broker import Assignment
from schemas.names import BusNames
from services.broker.bind import token_hash
from services.broker.client import bind
from services.broker.service import Broker, assignments_bucket
from services.broker.settings import BrokerSettings
from services.common.natsserver import NatsServerProcess
from tests.plugins.sandboxhost import SandboxHostProcess

AGENTBUS = Path(sys.executable).parent / "agentbus"


class Bench:
    """Private servers, a prefix per run, brokers in and out of process."""

    def __init__(self, url: str, host: SandboxHostProcess, nc: Any) -> None:
        self.url, self.host, self.nc = url, host, nc
        self.names = BusNames("bf" + secrets.token_hex(3))

    def settings(self) -> BrokerSettings:
        return msgspec.convert(
            {
                "bus_prefix": self.names.prefix,
                "sandboxhost_url": self.host.url,
                "sandboxhost_api_key": self.host.api_key,
            },
            BrokerSettings,
        )

    async def assign(self, worker: str, session: str) -> str:
        kv = await assignments_bucket(self.nc.jetstream(), self.names)
        token = secrets.token_urlsafe(16)
        rec = Assignment(
            worker_id=worker,
            session_id=session,
            token_sha256=token_hash(token),
            assigned_at="2026-11-30T00:00:00Z",
        )
        await kv.put(worker, msgspec.json.encode(rec))
        return token

    def spawn(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env.update(
            {
                "AGENTBUS_NATS_URL": self.url,
                "AGENTBUS_BUS_PREFIX": self.names.prefix,
                "AGENTBUS_SANDBOXHOST_URL": self.host.url,
                "AGENTBUS_SANDBOXHOST_API_KEY": self.host.api_key,
            }
        )
        return subprocess.Popen(
            [str(AGENTBUS), "broker"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def replica(self, stack: AsyncExitStack, http: Any) -> Broker:
        broker = Broker(self.settings(), self.nc, http)
        await broker.open(stack)
        return broker

    async def kill_mid_create(self, http: Any, i: int) -> float:
        proc = self.spawn()
        try:
            async with AsyncExitStack() as stack:
                survivor = await self.replica(stack, http)
                await _wait_answering(self.nc, self.names)
                self.host.set_faults(delay_ms={"create": 1500})
                sid = f"kill{i}"
                token = await self.assign(f"wk{i}", sid)
                pending = asyncio.create_task(
                    bind(self.nc, self.names, f"wk{i}", token)
                )
                while (await survivor.life.store.get(sid)).record.state != "creating":
                    await asyncio.sleep(0.01)
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                killed = time.perf_counter()
                await survivor.subscribe(stack)
                await pending
                took = time.perf_counter() - killed
                self.host.clear_faults()
                return took
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    async def no_broker_then_one(self, http: Any, i: int) -> float:
        token = await self.assign(f"wn{i}", f"none{i}")
        pending = asyncio.create_task(bind(self.nc, self.names, f"wn{i}", token))
        await asyncio.sleep(1.0)  # the outage being measured, not a sync point
        async with AsyncExitStack() as stack:
            broker = await self.replica(stack, http)
            await broker.subscribe(stack)
            up = time.perf_counter()
            await pending
            return time.perf_counter() - up


async def _wait_answering(nc: Any, names: BusNames) -> None:
    while True:
        try:
            await nc.request(names.broker_bind, b"{}", timeout=1)
            return
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            await asyncio.sleep(0.05)


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50_s": round(statistics.median(samples), 2),
        "max_s": round(max(samples), 2),
        "n": len(samples),
    }


async def main(repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServerProcess(Path(tmp) / "nats")
        server.start()
        host = SandboxHostProcess(Path(tmp) / "host")
        host.start()
        try:
            nc = await nats.connect(server.url)
            bench = Bench(server.url, host, nc)
            await ensure_log_stream(nc.jetstream(), bench.names, EventStoreSettings())
            async with aiohttp.ClientSession() as http:
                kills = [await bench.kill_mid_create(http, i) for i in range(repeat)]
                gaps = [await bench.no_broker_then_one(http, i) for i in range(repeat)]
            await nc.close()
            return {
                "kill_mid_create_to_grant": summary(kills),
                "replica_up_to_grant": summary(gaps),
                "settings": {"broker_op_lease_s": 6.0, "silence_s": 3.0},
            }
        finally:
            host.stop()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.repeat)), indent=2))
