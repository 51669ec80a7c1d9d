"""Open event streams per device, summed over every gateway process.

Each gateway keeps its own counts in memory (exact for itself) and mirrors
them into a KV bucket as ``s.<device>.<instance>`` → count. Admitting a stream
sums the other instances' keys for the device with this process's count. The
bucket's entries expire after ``ttl_s`` unless refreshed (each process rewrites
its non-zero counts every ``ttl_s / 3``), so a gateway that was SIGKILLed stops
counting against its devices within ``ttl_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from eventstore.kvscan import latest
from eventstore.streams import ensure_kv
from schemas.ids import new_id
from schemas.names import BusNames

log = logging.getLogger(__name__)


async def open_stream_counts(
    js: JetStreamContext, names: BusNames, ttl_s: float
) -> KeyValue:
    """The expiring bucket of stream counts (declared idempotently)."""
    config = KeyValueConfig(
        bucket=names.streams_bucket, history=1, ttl=ttl_s, storage=StorageType.MEMORY
    )
    return await ensure_kv(js, config)  # one that exists keeps its TTL


class StreamCounts:
    """This process's open streams per device, mirrored to the shared bucket."""

    def __init__(
        self,
        kv: KeyValue | None,
        ttl_s: float = 60.0,
        reopen: Callable[[], Awaitable[KeyValue]] | None = None,
    ) -> None:
        self._kv = kv
        self._ttl = ttl_s
        # Declares the bucket again: a memory bucket does not survive a restart
        # of a single nats-server, and without it every new stream answered 503.
        self._reopen = reopen
        self.instance = new_id("gw")
        self._local: dict[str, int] = {}

    def local(self, device_id: str) -> int:
        """Streams the device has open on this process."""
        return self._local.get(device_id, 0)

    async def total(self, device_id: str) -> int:
        """Streams the device has open on every gateway (this one exactly)."""
        mine = self.local(device_id)
        if self._kv is None:
            return mine
        try:
            return mine + await self._others(self._kv, device_id)
        except NotFoundError:
            if self._reopen is None:
                raise
            log.warning("stream counts bucket gone (NATS restarted?): declared again")
            self._kv = await self._reopen()
            for device, count in list(self._local.items()):
                await self._publish(device, count)
            return mine  # the others republish theirs on their next refresh

    async def _others(self, kv: KeyValue, device_id: str) -> int:
        """The device's streams on the other gateways."""
        others = 0
        # One scan of the device's keys: every instance's count at once.
        for item in await latest(kv, f"s.{device_id}.*"):
            if item.key.endswith("." + self.instance) or not item.value:
                continue
            with contextlib.suppress(ValueError):
                others += int(item.value)
        return others

    async def add(self, device_id: str, delta: int) -> None:
        """Count a stream in (+1) or out (-1), and publish the new count."""
        count = self._local.get(device_id, 0) + delta
        if count > 0:
            self._local[device_id] = count
        else:
            self._local.pop(device_id, None)
        await self._publish(device_id, count)

    async def refresh(self, stop: asyncio.Event) -> None:
        """Rewrite every non-zero count before it expires, until ``stop``."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._ttl / 3)
            for device_id, count in list(self._local.items()):
                await self._publish(device_id, count)

    async def _publish(self, device_id: str, count: int) -> None:
        if self._kv is None:
            return
        key = f"s.{device_id}.{self.instance}"
        try:
            if count > 0:
                await self._kv.put(key, str(count).encode())
            else:
                await self._kv.delete(key)
        except (nats.errors.Error, TimeoutError) as exc:
            # The local count stays exact; the shared one heals on refresh.
            log.warning("stream count of %s not published: %r", device_id, exc)
