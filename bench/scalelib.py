"""Shared parts of ``bench/scale.py``: the processes under test and fast fills.

A nats-server and a real gateway process (restartable, with extra settings);
pipelined writers of well-formed logs and index records, so 100k sessions or a
100k-event session take seconds to set up rather than the append path's minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
from nats.aio.client import Client

from bench.chaoslib import process_usage, wait_healthy
from eventstore.chain import digest
from eventstore.index import SessionRecord
from eventstore.log import JetStreamLog, log_headers
from schemas.codec import encode_event
from schemas.events import Event, Payload, SessionCreated, ToolUpdate
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess, free_port
from services.gateway.tokens import issue

SECRET = "bench-secret"
ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def token(device: str) -> str:
    return issue(SECRET.encode(), device)


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1), rounded (same unit as the values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


class Stack:
    """nats-server + one gateway process, restartable with other settings."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.nats = NatsServerProcess(workdir / "nats")
        self.port = free_port()
        self.prefix = "scale" + uuid.uuid4().hex[:6]
        self.names = BusNames(self.prefix)
        self.gateway: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    async def start(self) -> None:
        await self.nats.astart()
        self.nc: Client = await nats.connect(self.nats.url)
        self.log = JetStreamLog(self.nc, self.names)
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=False)
        )
        await self.start_gateway()

    async def start_gateway(self, **env: str) -> None:
        self.env = {
            "AGENTBUS_DEVICE_SECRET": SECRET,
            "AGENTBUS_BUS_PREFIX": self.prefix,
            "AGENTBUS_GATEWAY_RATE_PER_S": "0",
            # 10k sessions and 10k streams on one device
            "AGENTBUS_GATEWAY_MAX_SESSIONS": "0",
            "AGENTBUS_GATEWAY_MAX_STREAMS": "0",
            "AGENTBUS_GATEWAY_LOG_LEVEL": "WARNING",
            **env,
        }
        with open(self.workdir / "gateway.log", "ab") as out:
            self.gateway = subprocess.Popen(
                [sys.executable, "-m", "services.gateway", "--listen",
                 f"127.0.0.1:{self.port}", "--nats", self.nats.url,
                 "--data-dir", str(self.workdir)],
                cwd=ROOT, env={**os.environ, **self.env}, stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        await wait_healthy(self.http, self.url("/healthz"), 60)

    async def restart_gateway(self, **env: str) -> None:
        self.stop_gateway()
        await self.start_gateway(**env)

    def stop_gateway(self) -> None:
        if self.gateway is not None:
            self.gateway.terminate()
            self.gateway.wait(60)
            self.gateway = None

    async def stop(self) -> None:
        """Whatever started (a start that failed half-way included)."""
        if hasattr(self, "http"):
            await self.http.close()
        if hasattr(self, "nc"):
            await self.nc.close()
        self.stop_gateway()
        self.nats.stop()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def usage(self) -> tuple[float, float]:
        """(CPU seconds, RSS MiB) of the gateway process."""
        assert self.gateway is not None
        return process_usage(self.gateway.pid)

    async def call(self, method: str, path: str, device: str) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token(device)}"}
        async with self.http.request(method, self.url(path), headers=headers) as r:
            return r.status, await r.json()


def _ts(i: int) -> str:
    stamp = (T0 + timedelta(microseconds=i)).isoformat(timespec="microseconds")
    return stamp.replace("+00:00", "Z")


async def fill_sessions(
    stack: Stack, count: int, devices: list[str], tag: str
) -> list[str]:
    """``count`` sessions (seq 1 ``session.created`` + index records), round-robin
    over ``devices``, pipelined; created_at increases with the index."""
    js, names = stack.nc.jetstream(), stack.names
    bucket = names.sessions_bucket
    sids = []
    for i in range(count):
        device = devices[i % len(devices)]
        sid = f"s_{tag}{i:06d}"
        created = SessionCreated(device_id=device, title=f"t{i}")
        raw = _event(sid, 1, created, _ts(i), None)
        await _publish_event(js, names, sid, 1, created.TYPE, raw)
        record = msgspec.json.encode(
            SessionRecord(session_id=sid, device_id=device, title=f"t{i}",
                          created_at=_ts(i))
        )  # fmt: skip
        await js.publish_async(f"$KV.{bucket}.dev.{device}.{sid}", record)
        await js.publish_async(f"$KV.{bucket}.sid.{sid}", record)
        sids.append(sid)
        if i % 2000 == 1999:
            await js.publish_async_completed()
    await js.publish_async_completed()
    return sids


async def fill_log(stack: Stack, sid: str, upto: int) -> None:
    """Append ``tool.update`` events after the session's head up to seq ``upto``."""
    js, names = stack.nc.jetstream(), stack.names
    head = (await stack.log.read(sid, (await stack.log.last_seq(sid)) - 1, 1))[0]
    prev = digest(head.raw)
    for seq in range(head.seq + 1, upto + 1):
        data = ToolUpdate(call_id="c", text="x" * 64)
        raw = _event(sid, seq, data, _ts(seq), prev)
        prev = digest(raw)
        await _publish_event(js, names, sid, seq, data.TYPE, raw)
        if seq % 5000 == 0:
            await js.publish_async_completed()
    await js.publish_async_completed()


def _event(sid: str, seq: int, data: Payload, ts: str, prev: str | None) -> bytes:
    return encode_event(
        Event(session_id=sid, seq=seq, id=f"ev_{sid}_{seq}", type=data.TYPE, ts=ts,
              actor="bench", data=data, prev=prev)
    )  # fmt: skip


async def _publish_event(
    js: Any, names: BusNames, sid: str, seq: int, event_type: str, raw: bytes
) -> None:
    """Pipelined, with the headers the append path writes (readers parse five)."""
    headers = log_headers(names, sid, seq, event_type, f"ev_{sid}_{seq}")
    subject = names.log_subject(sid, seq, event_type)
    await js.publish_async(subject, raw, headers=headers)
