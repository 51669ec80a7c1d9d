"""Per-device stream counts across gateways survive the loss of their bucket.

The bucket is memory storage: a single nats-server restarted (R1 chaos run,
log-leader kill) comes back without it, and every new event stream then
answered 503 until a gateway restart. Deleting the bucket is the same loss.
"""

from __future__ import annotations

from nats.aio.client import Client
from nats.js.kv import KeyValue

from schemas.names import BusNames
from services.gateway.streamcount import StreamCounts, open_stream_counts

TTL_S = 60.0


async def test_a_lost_bucket_is_declared_again_and_counting_goes_on(
    nc: Client, prefix: str
) -> None:
    js, names = nc.jetstream(), BusNames(prefix)

    async def reopen() -> KeyValue:
        return await open_stream_counts(js, names, TTL_S)

    here = StreamCounts(await reopen(), TTL_S, reopen=reopen)
    there = StreamCounts(await reopen(), TTL_S, reopen=reopen)
    await here.add("d1", +1)
    await there.add("d1", +2)
    assert await here.total("d1") == 3
    await js.delete_key_value(names.streams_bucket)
    assert await here.total("d1") == 1  # its own count exact; others re-publish
    kv = await js.key_value(names.streams_bucket)
    entry = await kv.get(f"s.d1.{here.instance}")
    assert entry.value == b"1"
    await there.add("d1", -1)  # the other gateway's next write lands again
    assert await here.total("d1") == 2
