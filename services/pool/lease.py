"""Session leases in JetStream KV: exactly one worker owns a session at a time.

Key = session id; value = :class:`Lease`. Every change is a compare-and-set on
the key's revision (``create`` = CAS against "absent"), so of two racing pools
exactly one wins. Expiry is a wall-clock deadline in the record, pushed forward
by the owner's heartbeat; an expired lease may be taken over by CAS on the
revision it was read at, so a crashed owner never blocks a session for longer
than the TTL (clocks of pool hosts must agree to within a fraction of it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import msgspec
from nats.js.errors import (
    APIError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from nats.js.kv import KeyValue

from eventstore.kvscan import latest
from services.pool.errors import LeaseLostError

_WRONG_LAST_SEQUENCE = (10071, 10164)


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    """Who owns a session, and until when (unix seconds) unless renewed."""

    session_id: str
    worker_id: str
    pool_id: str
    host: str
    pid: int
    expires_at: float
    acquired_at: float
    # The owner's PID namespace on ``host`` ("" unknown): a pool in the same one
    # can tell from ``pid`` that the owner is dead before the lease expires.
    pidns: str = ""


class Held(msgspec.Struct, frozen=True):
    """A lease as read, with the revision a CAS must name."""

    lease: Lease
    revision: int

    def expired(self, now: float | None = None) -> bool:
        """Past its deadline (its owner stopped renewing it)."""
        return self.lease.expires_at < (time.time() if now is None else now)


_DECODER = msgspec.json.Decoder(Lease)


def _pid_namespace() -> str:
    """This process's PID namespace ("" where /proc does not say)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


PIDNS = _pid_namespace()


def owner_gone(lease: Lease, host: str) -> bool:
    """The lease's owner ran on ``host`` in our PID namespace and has exited.

    Then its lease need not be waited out (e.g. `agentbus up` SIGKILLed and
    started again). Anything less certain — another host or namespace, no
    PID, a live PID (even a reused one) — waits for the expiry.
    """
    if not PIDNS or lease.pidns != PIDNS or lease.host != host or lease.pid <= 0:
        return False
    try:
        os.kill(lease.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class LeaseStore:
    """CAS operations on the leases bucket."""

    def __init__(self, kv: KeyValue, ttl_s: float) -> None:
        self.kv = kv
        self.ttl_s = ttl_s

    def fresh(self, lease: Lease) -> Lease:
        """``lease`` with its deadline one TTL from now."""
        return msgspec.structs.replace(lease, expires_at=time.time() + self.ttl_s)

    async def get(self, session_id: str) -> Held | None:
        """The current lease of a session, or None."""
        try:
            entry = await self.kv.get(session_id)
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        return Held(_DECODER.decode(entry.value), entry.revision or 0)

    async def acquire(self, lease: Lease) -> Held | None:
        """Take a free or expired lease; None while someone else holds it."""
        current = await self.get(lease.session_id)
        lease = self.fresh(lease)
        value = msgspec.json.encode(lease)
        try:
            if current is None:
                revision = await self.kv.create(lease.session_id, value)
            elif current.expired():
                revision = await self.kv.update(
                    lease.session_id, value, last=current.revision
                )
            else:
                return None
        except KeyWrongLastSequenceError:
            return None
        return Held(lease, revision)

    async def take(self, held: Held, lease: Lease) -> Held | None:
        """Replace ``held`` (as read) by ``lease``; None if it moved meanwhile."""
        lease = self.fresh(lease)
        try:
            revision = await self.kv.update(
                lease.session_id, msgspec.json.encode(lease), last=held.revision
            )
        except KeyWrongLastSequenceError:
            return None
        return Held(lease, revision)

    async def renew(self, held: Held) -> Held:
        """Push the deadline forward; :class:`LeaseLostError` if it moved under us."""
        lease = self.fresh(held.lease)
        try:
            revision = await self.kv.update(
                lease.session_id, msgspec.json.encode(lease), last=held.revision
            )
        except KeyWrongLastSequenceError as exc:
            raise LeaseLostError(lease.session_id, held.revision) from exc
        return Held(lease, revision)

    async def release(self, held: Held) -> bool:
        """Delete the lease if it is still ours; False if it had moved on."""
        try:
            await self.kv.delete(held.lease.session_id, last=held.revision)
        except APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                return False
            raise
        return True

    async def expired(
        self, dead: Callable[[Lease], bool] = lambda lease: False
    ) -> list[Held]:
        """Every lease past its deadline, or whose owner ``dead`` says is gone."""
        out = []
        for item in await latest(self.kv, ">", values=False):
            held = await self.get(item.key)
            if held is not None and (held.expired() or dead(held.lease)):
                out.append(held)
        return out
