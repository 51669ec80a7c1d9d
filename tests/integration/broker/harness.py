"""Test harness: broker replicas in-process, the pool's part played through KV."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import msgspec
from nats.aio.client import Client

from eventstore.log import JetStreamLog
from schemas.broker import Assignment
from schemas.names import BusNames
from services.broker.service import Broker, assignments_bucket
from services.broker.settings import BrokerSettings


def settings_for(host: Any, prefix: str, **over: Any) -> BrokerSettings:
    """Short timers and the test's prefix."""
    base: dict[str, Any] = {
        "bus_prefix": prefix,
        "broker_provider": "local",
        "sandboxhost_url": host.url,
        "sandboxhost_api_key": host.api_key,
        "sandbox_idle_pause_s": 0.5,
        "sandbox_archive_after_s": 0.5,
        "broker_resume_backoff_s": 0.05,
        "broker_op_lease_s": 5.0,
        "sandbox_timeout_s": 600,
    }
    base.update(over)
    return msgspec.convert(base, BrokerSettings)


class Harness:
    """One or more broker replicas plus helpers that play the pool's part."""

    def __init__(self, nc: Client, names: BusNames, host: Any, stack: AsyncExitStack):
        self.nc = nc
        self.names = names
        self.host = host
        self.stack = stack
        self.http: aiohttp.ClientSession | None = None
        self.log = JetStreamLog(nc, names)

    async def replica(
        self,
        *,
        subscribe: bool = True,
        clock: Callable[[], float] = time.time,
        **over: Any,
    ) -> Broker:
        """Start a broker replica (loops are driven by the test; ``clock`` is
        the lifecycle's, so timer tests move time instead of sleeping)."""
        if self.http is None:
            self.http = await self.stack.enter_async_context(aiohttp.ClientSession())
        settings = settings_for(self.host, self.names.prefix, **over)
        broker = Broker(settings, self.nc, self.http, clock)
        await broker.open(self.stack)
        if subscribe:
            await broker.subscribe(self.stack)
        return broker

    async def assign(self, worker_id: str, session_id: str) -> str:
        """Write the pool's assignment record; returns the one-time token."""
        js = self.nc.jetstream()
        kv = await assignments_bucket(js, self.names)
        token = secrets.token_urlsafe(16)
        record = Assignment(
            worker_id=worker_id,
            session_id=session_id,
            token_sha256=hashlib.sha256(token.encode()).hexdigest(),
            assigned_at="2026-11-29T00:00:00Z",
        )
        await kv.put(worker_id, msgspec.json.encode(record))
        return token

    async def release(self, worker_id: str) -> None:
        """End a worker's assignment as the pool would."""
        js = self.nc.jetstream()
        kv = await assignments_bucket(js, self.names)
        entry = await kv.get(worker_id)
        rec = msgspec.json.decode(entry.value or b"", type=Assignment)
        released = msgspec.structs.replace(rec, state="released")
        await kv.put(worker_id, msgspec.json.encode(released))

    async def states(self, session_id: str) -> list[tuple[str, str]]:
        """The session's ``sandbox.state`` events as (state, reason)."""
        out = []
        for stored in await self.log.read(session_id, 0):
            ev = stored.event()
            if ev.type == "sandbox.state":
                out.append((ev.data.state, ev.data.reason))  # type: ignore[union-attr]
        return out

    async def ours(self, provider: Any) -> list[str]:
        """Sandbox ids the provider lists for this prefix."""
        return [
            s.sandbox_id
            for s in await provider.list()
            if s.metadata.get("agentbus_prefix") == self.names.prefix
        ]
