"""The session index on NATS KV: which device owns a session, a device's sessions.

Services share nothing but NATS, so the gateway lists sessions from here rather
than from the projector's SQLite. The log stays the truth: the projector re-puts
a record for every ``session.created`` it copies, repairing a crash between the
first append and the index write.
"""

from __future__ import annotations

import logging

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from eventstore.kvscan import latest
from eventstore.streams import ensure_sessions_bucket
from schemas.names import BusNames


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the index knows of a session."""

    session_id: str
    device_id: str
    title: str = ""
    created_at: str = ""
    metadata: dict[str, str] = {}


_DECODER = msgspec.json.Decoder(SessionRecord)
log = logging.getLogger(__name__)


def decode_record(key: str, value: bytes | None) -> SessionRecord | None:
    """A record, or None for an empty or undecodable value (logged, skipped)."""
    if not value:
        return None
    try:
        return _DECODER.decode(value)
    except msgspec.DecodeError as exc:
        log.warning("session index: skipping undecodable record %s: %s", key, exc)
        return None


class SessionIndex:
    """KV index: ``sid.<session>`` and ``dev.<device>.<session>`` → record."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    @property
    def kv(self) -> KeyValue:
        """The bucket (paged listings read it directly)."""
        return self._kv

    @classmethod
    async def open(cls, js: JetStreamContext, names: BusNames) -> SessionIndex:
        """Declare the bucket (idempotent) and wrap it."""
        return cls(await ensure_sessions_bucket(js, names))

    async def add(self, record: SessionRecord) -> None:
        """Record a session (idempotent: same record, same keys)."""
        value = msgspec.json.encode(record)
        await self._kv.put(f"dev.{record.device_id}.{record.session_id}", value)
        await self._kv.put(f"sid.{record.session_id}", value)

    async def get(self, session_id: str) -> SessionRecord | None:
        """The record of a session, or None if no such session."""
        try:
            entry = await self._kv.get(f"sid.{session_id}")
        except KeyNotFoundError:
            return None
        return decode_record(f"sid.{session_id}", entry.value)

    async def list(self, device_id: str) -> list[SessionRecord]:
        """A device's sessions, newest first (one watcher, not one get per key)."""
        records: list[SessionRecord] = []
        for item in await latest(self._kv, f"dev.{device_id}.*"):
            record = decode_record(item.key, item.value)
            if record is not None:
                records.append(record)
        # Newest first; ties (same timestamp) by id, the order pages use too.
        records.sort(key=lambda r: (r.created_at, r.session_id), reverse=True)
        return records
