"""The per-session sandbox record in JetStream KV; every change is a revision CAS."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Literal

import msgspec
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from eventstore.kvscan import latest
from eventstore.streams import ensure_kv
from schemas.names import BusNames

State = Literal[
    "none",
    "creating",
    "running",
    "pausing",
    "paused",
    "resuming",
    "rebuilding",
    "archiving",
    "archived",
    "deleting",
    "deleted",
    "failed",
]
# States a replica holds while it talks to the provider; others may take over
# once ``lease_until`` has passed (the holder died mid-operation).
TRANSITIONAL: frozenset[str] = frozenset(
    {"creating", "pausing", "resuming", "rebuilding", "archiving", "deleting"}
)


class SandboxRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the broker knows about one session's sandbox."""

    session_id: str
    state: State = "none"
    provider: str = ""
    sandbox_id: str | None = None
    generation: int = 0
    nonce: str = ""
    envd_url: str = ""
    access_token: str | None = None
    token_expires_at: float = 0.0
    owner: str = ""
    lease_until: float = 0.0
    last_active: float = 0.0
    busy_until: float = 0.0  # a running tool holds the sandbox awake until then
    paused_at: float = 0.0
    archived_at: float = 0.0
    deleted_at: float = 0.0
    last_archive: str | None = None
    dirty: bool = True
    notice_pending: bool = False
    rebuilt: bool = False
    reason: str = ""
    # Metering: when the current billed state (running/paused/archived) began,
    # and the workspace bytes the last archive holds.
    state_since: float = 0.0
    archive_bytes: int = 0

    def leased(self, now: float | None = None) -> bool:
        """True while a replica is mid-operation on this record."""
        return self.state in TRANSITIONAL and self.lease_until > (now or time.time())


_decoder = msgspec.json.Decoder(SandboxRecord)


class Versioned(msgspec.Struct, frozen=True):
    """A record and the KV revision it was read at (0: absent)."""

    record: SandboxRecord
    revision: int


class KvRecordStore:
    """CAS access to ``<prefix>_sandboxes`` (key = session id)."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    @classmethod
    async def open(cls, js: JetStreamContext, names: BusNames) -> KvRecordStore:
        """Declare the bucket idempotently and wrap it."""
        kv = await ensure_kv(
            js,
            KeyValueConfig(
                bucket=names.sandboxes_bucket, history=1, storage=StorageType.FILE
            ),
        )
        return cls(kv)

    async def get(self, session_id: str) -> Versioned:
        """The record, or a fresh ``none`` record at revision 0."""
        try:
            entry = await self.kv.get(session_id)
        except KeyNotFoundError:
            return Versioned(SandboxRecord(session_id=session_id), 0)
        if entry.value is None:
            return Versioned(SandboxRecord(session_id=session_id), 0)
        return Versioned(_decoder.decode(entry.value), int(entry.revision or 0))

    async def put(self, current: Versioned, record: SandboxRecord) -> Versioned | None:
        """Write ``record`` if nobody changed the key since ``current``; else None."""
        data = msgspec.json.encode(record)
        try:
            if current.revision == 0:
                rev = await self.kv.create(record.session_id, data)
            else:
                rev = await self.kv.update(record.session_id, data, current.revision)
        except KeyWrongLastSequenceError:
            return None
        return Versioned(record, rev)

    async def change(
        self, session_id: str, fn: Callable[[SandboxRecord], SandboxRecord | None]
    ) -> Versioned | None:
        """Apply ``fn`` under CAS, re-reading on conflict; None if ``fn`` declines."""
        for _ in range(50):
            cur = await self.get(session_id)
            new = fn(cur.record)
            if new is None:
                return None
            done = await self.put(cur, new)
            if done is not None:
                return done
        raise RuntimeError(f"record {session_id}: CAS contention did not settle")

    async def remove(self, current: Versioned) -> bool:
        """Delete the key if unchanged since ``current``."""
        try:
            await self.kv.delete(current.record.session_id, last=current.revision)
        except KeyWrongLastSequenceError:
            return False
        return True

    async def all(self) -> AsyncIterator[Versioned]:
        """Every record (for sweeps and the reconciler)."""
        for item in await latest(self.kv, ">", values=False):
            cur = await self.get(item.key)
            if cur.revision:
                yield cur
