"""Summary snapshots in KV: a cold ``GET`` of a long session folds only its tail.

Without them, the first lookup of a session on a gateway (restart, another
replica, an evicted cache entry) folds the whole log: seconds for 100k events.
A gateway that folded ``every`` events past a session's last snapshot stores
its summary with the digest of the event at its seq (key = session id). The
next cold lookup loads it, checks with one bounded read that the log still has
that very event at that seq, and folds only what came after. A snapshot that
does not match or does not decode is ignored (the log is the truth); failing to
store one only costs the next cold lookup time.
"""

from __future__ import annotations

import hashlib
import logging

import msgspec
import nats.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from eventstore.errors import RangeUnavailableError
from eventstore.fold import SessionSummary
from eventstore.log import JetStreamLog
from eventstore.streams import ensure_kv
from schemas.names import BusNames

log = logging.getLogger(__name__)

# Events folded past the last snapshot before a new one is stored.
SNAPSHOT_EVERY = 1000
# KV values are NATS messages: stay well under the default 1 MiB payload limit.
MAX_SNAPSHOT_BYTES = 900 * 1024


class SummarySnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A summary folded up to ``summary.last_seq``, whose event's bytes hash to
    ``digest``."""

    summary: SessionSummary
    digest: str


def event_digest(raw: bytes) -> str:
    """What a snapshot records of the event at its seq."""
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


_DECODER = msgspec.json.Decoder(SummarySnapshot)


class SummarySnapshots:
    """Load and store summary snapshots of sessions."""

    def __init__(self, kv: KeyValue, log_: JetStreamLog, every: int) -> None:
        self._kv = kv
        self._log = log_
        self.every = max(1, every)

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        names: BusNames,
        log_: JetStreamLog,
        every: int = SNAPSHOT_EVERY,
    ) -> SummarySnapshots:
        """Declare the bucket (idempotent) and wrap it."""
        config = KeyValueConfig(
            bucket=names.summaries_bucket, history=1, storage=StorageType.FILE
        )
        return cls(await ensure_kv(js, config), log_, every)

    async def load(self, session_id: str) -> SessionSummary | None:
        """The session's snapshot if the log still agrees with it, else None."""
        try:
            entry = await self._kv.get(session_id)
            snapshot = _DECODER.decode(entry.value or b"")
        except (KeyNotFoundError, msgspec.DecodeError):
            return None
        seq = snapshot.summary.last_seq
        if seq < 1:
            return None
        try:
            at = await self._log.read(session_id, seq - 1, limit=1)
        except RangeUnavailableError:
            at = []
        if not at or at[0].seq != seq or event_digest(at[0].raw) != snapshot.digest:
            log.warning("ignoring a stale summary snapshot of %s", session_id)
            return None
        return snapshot.summary

    async def save(self, session_id: str, summary: SessionSummary, raw: bytes) -> bool:
        """Store a snapshot whose last event's bytes are ``raw``; False if not."""
        value = msgspec.json.encode(
            SummarySnapshot(summary=summary, digest=event_digest(raw))
        )
        if len(value) > MAX_SNAPSHOT_BYTES:
            return False
        try:
            await self._kv.put(session_id, value)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("could not store a summary snapshot of %s: %s", session_id, exc)
            return False
        return True
