"""One active copier among projector replicas: a lease on NATS KV.

The lease is one key in a bucket whose entries expire after ``ttl_s``: a
replica that ``create``s it is the copier and renews it by revision every
``ttl_s / 3``; the others stand by (they still answer range reads) and try to
create it again at the same pace, so a dead copier is replaced within about
one TTL. A copier that cannot renew for ``0.8 * ttl_s`` stops copying before
the server would let another take over. SQLite stays the truth about what was
copied (an idempotent apply up to a monotone position), so even an overlap at
a hand-over copies nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from eventstore.streams import ensure_kv
from schemas.names import BusNames

log = logging.getLogger(__name__)

KEY = "copier"
# A lease not renewed for this share of its TTL is given up by its holder.
_HOLD = 0.8


async def lease_bucket(js: JetStreamContext, names: BusNames, ttl_s: float) -> KeyValue:
    """The lease bucket (declared idempotently; an existing one is used as it is)."""
    config = KeyValueConfig(
        bucket=names.projector_lease_bucket,
        history=1,
        ttl=ttl_s,
        storage=StorageType.FILE,
    )
    return await ensure_kv(js, config)


class CopierLease:
    """Acquire, renew and release the copier lease for one replica."""

    def __init__(self, kv: KeyValue, replica: str, ttl_s: float) -> None:
        self._kv = kv
        self.replica = replica
        self.ttl_s = ttl_s
        self._revision: int | None = None
        self._renewed_at = 0.0

    @property
    def held(self) -> bool:
        """True while this replica holds a lease it renewed recently enough."""
        fresh = time.monotonic() - self._renewed_at < _HOLD * self.ttl_s
        return self._revision is not None and fresh

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this replica holds the lease (True) or ``stop`` is set."""
        while not stop.is_set():
            if await self._try_create():
                log.info("projector %s is the copier", self.replica)
                return True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.ttl_s / 3):
                    await stop.wait()
        return False

    async def _try_create(self) -> bool:
        try:
            self._revision = await self._kv.create(KEY, self.replica.encode())
        except KeyWrongLastSequenceError:
            return False  # another replica copies
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("projector lease: create failed: %r", exc)
            return False
        self._renewed_at = time.monotonic()
        return True

    async def keep(self, lost: asyncio.Event, stop: asyncio.Event) -> None:
        """Renew until ``stop``; set ``lost`` (and return) once the lease is gone."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.ttl_s / 3):
                    await stop.wait()
            if stop.is_set():
                return
            await self._renew()
            if not self.held:
                log.warning("projector %s lost the copier lease", self.replica)
                self._revision = None
                lost.set()
                return

    async def _renew(self) -> None:
        if self._revision is None:
            return
        try:
            self._revision = await self._kv.update(
                KEY, self.replica.encode(), last=self._revision
            )
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            self._revision = None  # expired and taken, or deleted
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("projector lease: renew failed: %r", exc)
        else:
            self._renewed_at = time.monotonic()

    async def release(self) -> None:
        """Hand the lease over at once (a clean stop), if still ours."""
        revision, self._revision = self._revision, None
        if revision is None:
            return
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await self._kv.delete(KEY, last=revision)
