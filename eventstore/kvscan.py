"""Every key's latest value under a KV filter, without nats.py's empty-scan race.

nats.py 2.16's ``KeyValue.watch`` (and ``keys()``, built on it) decides that a
filter is empty from ``consumer_info().num_pending == 0`` and the messages the
client has *received* so far. When the server has already handed every
message to the consumer but not yet written them to the socket, the info says
nothing is pending, nothing was received, and the watch ends at once with no
entry: measured, 1 to 3 of 300 scans of a device's existing sessions came back
empty. A session list that is sometimes empty, a cap that sometimes counts
nothing, a sweep that sometimes sees no record.

Here the server's own count decides: the filter is empty only if nothing is
pending *and nothing was delivered* (``delivered.consumer_seq == 0``);
otherwise the scan ends with the delivery that says nothing more is pending.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.kv import KV_DEL, KV_MARKER_REASON, KV_OP, KV_PURGE, KeyValue

_GONE = {KV_DEL, KV_PURGE}


class KvItem(NamedTuple):
    """One key's latest value and its revision (stream seq)."""

    key: str
    value: bytes
    revision: int


async def latest(
    kv: KeyValue, keys: str, *, wait_s: float = 10.0, values: bool = True
) -> list[KvItem]:
    """The live keys matching ``keys`` (deleted and purged ones left out), each
    at its latest revision; ``values=False`` fetches headers only (empty values).
    """
    prefix = kv._pre
    found: dict[str, KvItem] = {}
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        meta = msg.metadata
        headers = msg.headers or {}
        key = msg.subject[len(prefix) :]
        # A marker (nats-server 2.11+: TTL, purge, remove) is a gone key too.
        if headers.get(KV_OP) in _GONE or KV_MARKER_REASON in headers:
            found.pop(key, None)
        else:
            found[key] = KvItem(key, msg.data, meta.sequence.stream)
        if meta.num_pending == 0:
            done.set()

    sub = await kv._js.subscribe(
        f"{prefix}{keys}",
        stream=kv._stream,
        cb=on_msg,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        headers_only=not values,
        inactive_threshold=60.0,
    )
    try:
        info = await sub.consumer_info()
        delivered = info.delivered.consumer_seq if info.delivered else 0
        if info.num_pending == 0 and not delivered:
            return []  # the server delivered nothing and has nothing to deliver
        async with asyncio.timeout(wait_s):
            await done.wait()
        return list(found.values())
    finally:
        await sub.unsubscribe()
