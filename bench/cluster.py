"""Cluster benchmark: R1 vs R3 latency and stream-leader failover (prints JSON).

For each of a single node (R1) and a 3-node JetStream cluster (R3, laid out as
``agentbus up --nats-cluster 3`` does, routes authenticated, the services'
permissions in force), starts one gateway process and measures:
- ``append``: sequential ``JetStreamLog.append`` to one session, paced at
  ``--rate``/s: p50/p99 of the acknowledgement;
- ``append_to_sse``: the same events read by one SSE client through the
  gateway: append start → SSE frame p50/p99.
Then on R3, ``failover``: appends run continuously (each retried with the same
event id until acknowledged) while the node leading the log stream is
SIGKILLed: the longest time appends were blocked, and how many acknowledged
events are missing from the log afterwards (must be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
from nats.aio.client import Client

from bench.sse import SseCounter, open_sse, pct
from eventstore.log import JetStreamLog
from schemas.events import ToolUpdate
from schemas.names import BusNames
from services.common.natsconn import connect_nats
from services.common.natsserver import free_port
from services.gateway.tokens import issue
from services.launcher.natsconf import load_credentials
from services.launcher.natsnodes import NatsNode, plan_nodes, write_nodes
from services.launcher.ready import wait_nats_ready

SECRET = "bench-secret"
ROOT = Path(__file__).resolve().parents[1]


class Stack:
    """NATS nodes (1 or 3) and one gateway, in ``workdir``."""

    def __init__(self, workdir: Path, nodes: int) -> None:
        self.workdir = workdir
        self.replicas = 1 if nodes == 1 else 3
        self.creds = load_credentials(workdir / "nats")
        self.nodes = plan_nodes(workdir / "nats", nodes, free_port())
        write_nodes(self.nodes, self.creds, workdir / "nats")
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.port = free_port()
        # A fresh store per run; the default prefix the permissions name.
        self.prefix = "agentbus"
        self.names = BusNames(self.prefix)
        self.token = issue(SECRET.encode(), "bench")
        self.url = ",".join(n.url for n in self.nodes)

    def start_node(self, node: NatsNode) -> None:
        with (self.workdir / f"{node.name}.log").open("ab") as out:
            self.procs[node.name] = subprocess.Popen(
                node.argv(), stdout=out, stderr=subprocess.STDOUT
            )

    def kill_node(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait()

    async def start(self) -> None:
        for node in self.nodes:
            self.start_node(node)
        await wait_nats_ready(
            [n.url for n in self.nodes], "admin", self.creds["admin"], asyncio.Event()
        )
        self.gateway = self._spawn_gateway()
        self.nc: Client = await connect_nats(
            self.url, "bench", user="pool", password=self.creds["pool"]
        )
        self.log = JetStreamLog(self.nc, self.names)
        self.http = aiohttp.ClientSession()
        async with asyncio.timeout(60):
            while not await self._healthy():
                await asyncio.sleep(0.1)

    def _spawn_gateway(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env.update(
            AGENTBUS_DEVICE_SECRET=SECRET,
            AGENTBUS_BUS_PREFIX=self.prefix,
            AGENTBUS_GATEWAY_RATE_PER_S="0",
            AGENTBUS_GATEWAY_LOG_LEVEL="WARNING",
            AGENTBUS_JS_REPLICAS=str(self.replicas),
            AGENTBUS_NATS_USER="gateway",
            AGENTBUS_NATS_PASSWORD=self.creds["gateway"],
        )
        argv = [sys.executable, "-m", "services.cli", "gateway", "--nats", self.url]
        argv += ["--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.workdir)]
        with (self.workdir / "gateway.log").open("ab") as out:
            return subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    async def _healthy(self) -> bool:
        try:
            async with self.http.get(self._url("/healthz")) as r:
                return r.status == 200
        except aiohttp.ClientError:
            return False

    def _url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def session(self) -> str:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.http.post(
            self._url("/v1/sessions"), json={}, headers=headers
        ) as r:
            body = await r.json()
            if r.status != 201:
                raise RuntimeError(f"POST /v1/sessions: {r.status} {body}")
            sid: str = body["session_id"]
            return sid

    async def stop(self) -> None:
        await self.http.close()
        await self.nc.close()
        self.gateway.terminate()
        self.gateway.wait(30)
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            proc.wait(30)


async def latency(stack: Stack, n: int, rate: float) -> dict[str, Any]:
    """append and append→SSE p50/p99 for ``n`` events paced at ``rate``/s."""
    sid = await stack.session()
    sent: dict[int, float] = {}
    sse_lat: array[float] = array("d")
    proto = SseCounter(sent, sse_lat)
    transport = await open_sse(stack.port, sid, stack.token, "?after=1", proto)
    await asyncio.sleep(0.3)  # let the stream settle before timing
    acks: list[float] = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(n):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing, not synchronisation
        sent[i + 2] = t0 = time.perf_counter()
        await stack.log.append(
            sid, ToolUpdate(call_id=f"c{i}", text="x" * 64), actor="b"
        )
        acks.append(time.perf_counter() - t0)
    proto.expect(n + 1)
    async with asyncio.timeout(30):
        await proto.reached.wait()
    transport.close()
    return {
        "events": n,
        "append_ms": {"p50": pct(acks, 0.5), "p99": pct(acks, 0.99)},
        "append_to_sse_ms": {"p50": pct(sse_lat, 0.5), "p99": pct(sse_lat, 0.99)},
        "sse_gaps": proto.gaps,
    }


async def failover(stack: Stack, seconds: float) -> dict[str, Any]:
    """Kill the log stream's leader node under continuous appends."""
    sid = await stack.session()
    js = stack.nc.jetstream()
    leader = (await js.stream_info(stack.names.log_stream)).cluster.leader  # type: ignore[union-attr]
    acked: list[str] = []
    gaps: list[float] = []
    stop = asyncio.Event()

    async def writer() -> None:
        last_ack = time.perf_counter()
        i = 0
        while not stop.is_set():
            event_id = f"e{i}"
            while True:
                try:
                    await asyncio.wait_for(
                        stack.log.append(
                            sid,
                            ToolUpdate(call_id=event_id, text="x"),
                            actor="b",
                            event_id=event_id,
                        ),
                        1.0,
                    )
                    break
                except Exception:
                    await asyncio.sleep(0.05)
            now = time.perf_counter()
            gaps.append(now - last_ack)
            last_ack = now
            acked.append(event_id)
            i += 1

    task = asyncio.create_task(writer())
    await asyncio.sleep(seconds / 3)
    killed_at = len(acked)
    stack.kill_node(str(leader))
    await asyncio.sleep(seconds)
    stop.set()
    await task
    stack.start_node(next(n for n in stack.nodes if n.name == leader))
    stored = [e.event() for e in await stack.log.read(sid, 1)]
    ids = {e.data.call_id for e in stored if isinstance(e.data, ToolUpdate)}
    new_leader = (await js.stream_info(stack.names.log_stream)).cluster.leader  # type: ignore[union-attr]
    return {
        "killed_leader": leader,
        "new_leader": new_leader,
        "acked": len(acked),
        "acked_before_kill": killed_at,
        "appends_blocked_max_s": round(max(gaps), 3),
        "acked_events_lost": len(set(acked) - ids),
        "duplicates": sum(isinstance(e.data, ToolUpdate) for e in stored) - len(ids),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"n": args.n, "rate_per_s": args.rate}
    for nodes in (1, 3):
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
            stack = Stack(Path(tmp), nodes)
            await stack.start()
            try:
                key = f"R{stack.replicas}"
                result[key] = await latency(stack, args.n, args.rate)
                if nodes == 3:
                    result["failover"] = await failover(stack, args.failover_s)
            finally:
                await stack.stop()
    r1, r3 = result["R1"], result["R3"]
    result["r3_over_r1_p50"] = {
        k: round(r3[k]["p50"] / r1[k]["p50"], 2)
        for k in ("append_ms", "append_to_sse_ms")
    }
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=1000, help="events per latency run")
    p.add_argument("--rate", type=float, default=200.0, help="appends per second")
    p.add_argument("--failover-s", type=float, default=8.0)
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(run(args)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
