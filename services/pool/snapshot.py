"""Conversation snapshots for long sessions: resume = snapshot + the log after it.

A worker that releases a session whose log grew by ``pool_snapshot_every``
events since the last snapshot stores its fold in KV (key = session id). The
next worker loads it, checks that the log's event at the snapshot's seq has the
id the snapshot recorded (one direct read), and folds only the events after it.
A snapshot that does not match, or does not decode, is ignored: the log is the
truth, the snapshot only a shortcut.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from eventstore.log import JetStreamLog
from eventstore.streams import ensure_kv
from schemas.names import BusNames
from services.pool.conversation import Conversation, Prompt

log = logging.getLogger(__name__)

# KV values are NATS messages: stay well under the default 1 MiB payload limit.
MAX_SNAPSHOT_BYTES = 900 * 1024


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation folded up to ``last_seq`` (whose event id is ``last_id``)."""

    last_seq: int
    last_id: str
    messages: list[dict[str, Any]]
    queue: list[Prompt] = []
    cancelled: list[str] = []
    policies: dict[str, str] = {}
    closed: bool = False


def snapshots_bucket(names: BusNames) -> str:
    """The KV bucket of snapshots (beside the leases bucket)."""
    return names.snapshots_bucket


async def ensure_snapshots(js: JetStreamContext, names: BusNames) -> KeyValue:
    """Open or create the snapshots bucket."""
    name = snapshots_bucket(names)
    return await ensure_kv(
        js, KeyValueConfig(bucket=name, history=1, storage=StorageType.FILE)
    )


def take(conv: Conversation, last_id: str) -> Snapshot:
    """A snapshot of a conversation between turns."""
    return Snapshot(
        last_seq=conv.last_seq,
        last_id=last_id,
        messages=conv.messages,
        queue=conv.queue,
        cancelled=sorted(conv.cancelled),
        policies=conv.policies,
        closed=conv.closed,
    )


def restore(snapshot: Snapshot) -> Conversation:
    """The conversation a snapshot holds."""
    conv = Conversation()
    conv.messages = list(snapshot.messages)
    conv.queue = list(snapshot.queue)
    conv.cancelled = set(snapshot.cancelled)
    conv.policies = dict(snapshot.policies)
    conv.closed = snapshot.closed
    conv.last_seq = snapshot.last_seq
    return conv


class SnapshotStore:
    """Load and save snapshots of one worker's sessions."""

    def __init__(self, kv: KeyValue, every: int) -> None:
        self.kv = kv
        self.every = every

    async def fold(
        self, log_: JetStreamLog, session_id: str
    ) -> tuple[Conversation, int]:
        """The session's conversation now, and the seq its snapshot (if any) had."""
        snapshot = await self._load(log_, session_id)
        conv = restore(snapshot) if snapshot else Conversation()
        base = snapshot.last_seq if snapshot else 0
        for stored in await log_.read(session_id, base):
            conv.apply(stored.event())
        return conv, base

    async def _load(self, log_: JetStreamLog, session_id: str) -> Snapshot | None:
        try:
            entry = await self.kv.get(session_id)
            snapshot = msgspec.json.decode(entry.value or b"", type=Snapshot)
        except (KeyNotFoundError, msgspec.DecodeError):
            return None
        at = await log_.read(session_id, snapshot.last_seq - 1, limit=1)
        if not at or at[0].event().id != snapshot.last_id:
            log.warning("ignoring a stale snapshot of %s", session_id)
            return None
        return snapshot

    async def maybe_save(
        self, log_: JetStreamLog, session_id: str, conv: Conversation, base: int
    ) -> bool:
        """Save when the log grew by ``every`` events since the last snapshot."""
        if conv.turn is not None or conv.last_seq - base < self.every:
            return False
        at = await log_.read(session_id, conv.last_seq - 1, limit=1)
        if not at:
            return False
        value = msgspec.json.encode(take(conv, at[0].event().id))
        if len(value) > MAX_SNAPSHOT_BYTES:
            return False
        await self.kv.put(session_id, value)
        return True
