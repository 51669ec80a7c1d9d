"""The id→seq index: an append retried after the dedupe window lands once.

JetStream drops a second publish with the same ``Nats-Msg-Id`` only inside its
dedupe window (120 s). A caller that retries an append with the *same event
id* later — its first try landed but the answer was lost, say the gateway
crashed between the append and its own record of it — and finds other events
stored after it would otherwise append a second copy.

Only a caller-given event id can be a retry (an id ``append`` makes itself is
fresh), so only those appends touch the index; the common path pays nothing.
Before publishing, the writer *claims* the id in KV ``<P>_eventids`` with one
``create`` of ``p<head seq>`` ("not stored, and if it ever lands, after this
seq"). After the ack it overwrites that with ``s<seq>`` by a plain publish (no
round trip). A claim that already exists marks a retry:

* ``s<seq>``: the event at that seq is checked (same ``Nats-Msg-Id``) and
  returned;
* ``p<after>``: the earlier try may have landed and the writer died before
  writing ``s<seq>``. The log is the truth: the events after ``after`` are
  read and the one whose id matches is returned (and recorded); none: the
  earlier try never landed, so this one is published.

Records expire after :data:`TTL_S` (as the gateway's idempotency keys do).
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import NamedTuple

import nats.errors
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from eventstore.streams import ensure_kv
from schemas.names import BusNames

log = logging.getLogger(__name__)
TTL_S = 7 * 24 * 3600.0
_TOKEN = re.compile(r"[-_=A-Za-z0-9]{1,128}")


class Mark(NamedTuple):
    """An earlier claim of an id: stored at ``seq``, or maybe after ``after``."""

    seq: int | None
    after: int


def parse_mark(raw: bytes) -> Mark:
    """``s<seq>`` or ``p<after>``; anything else counts as "after 0" (scan all)."""
    kind, digits = raw[:1], raw[1:]
    if not digits.isdigit():
        return Mark(None, 0)
    value = int(digits)
    return Mark(value, value - 1) if kind == b"s" else Mark(None, value)


def index_key(session_id: str, event_id: str) -> str:
    """``<session>.<event id>``; ids that are not plain tokens are hashed."""
    if _TOKEN.fullmatch(session_id) and _TOKEN.fullmatch(event_id):
        return f"{session_id}.{event_id}"
    pair = f"{session_id}\0{event_id}".encode()
    return "h." + hashlib.sha256(pair).hexdigest()[:40]


class IdIndex:
    """Claims and records of caller-given event ids (the bucket opened lazily)."""

    def __init__(self, nc: Client, names: BusNames, timeout: float = 2.0) -> None:
        self._nc = nc
        self._js = nc.jetstream(timeout=timeout)
        self.bucket = names.event_ids_bucket
        self._kv: KeyValue | None = None

    async def _open(self) -> KeyValue:
        if self._kv is None:
            self._kv = await ensure_kv(
                self._js,
                KeyValueConfig(
                    bucket=self.bucket, history=1, ttl=TTL_S, storage=StorageType.FILE
                ),
            )
        return self._kv

    async def claim(self, session_id: str, event_id: str, after: int) -> Mark | None:
        """Claim the id as "after seq ``after``"; an earlier claim: returns it."""
        kv = await self._open()
        key = index_key(session_id, event_id)
        try:
            await kv.create(key, b"p%d" % after)
        except KeyWrongLastSequenceError:
            entry = await kv.get(key)
            return parse_mark(entry.value or b"")
        return None

    async def stored(self, session_id: str, event_id: str, seq: int) -> None:
        """Record where the id landed: a plain publish, no round trip (after a
        :meth:`claim`, which opened the bucket).

        Lost (a crash, a dropped connection): the claim still bounds the scan.
        """
        key = index_key(session_id, event_id)
        try:
            await self._nc.publish(f"$KV.{self.bucket}.{key}", b"s%d" % seq)
        except nats.errors.Error as exc:
            # The append itself succeeded: its answer must not fail for this.
            log.warning("id %s of %s: seq not recorded: %r", event_id, session_id, exc)
