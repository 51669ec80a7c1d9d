"""``eventstore.kvscan.latest``: a KV filter's live keys at their latest values,
never an empty answer for keys that exist (nats.py's watch gave 1-3 in 300)."""

from __future__ import annotations

from nats.aio.client import Client
from nats.js.api import KeyValueConfig

from eventstore.kvscan import latest


async def test_latest_values_without_deleted_or_purged_keys(
    nc: Client, prefix: str
) -> None:
    kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=prefix))
    await kv.put("dev.a.s1", b"v1")
    await kv.put("dev.a.s2", b"old")
    second = await kv.put("dev.a.s2", b"new")
    await kv.put("dev.a.s3", b"gone")
    await kv.delete("dev.a.s3")
    await kv.put("dev.a.s4", b"purged")
    await kv.purge("dev.a.s4")
    await kv.put("dev.b.s5", b"other device")
    items = {item.key: item for item in await latest(kv, "dev.a.*")}
    assert {k: v.value for k, v in items.items()} == {
        "dev.a.s1": b"v1",
        "dev.a.s2": b"new",
    }
    assert items["dev.a.s2"].revision == second
    keys_only = await latest(kv, ">", values=False)
    assert sorted(i.key for i in keys_only) == ["dev.a.s1", "dev.a.s2", "dev.b.s5"]
    assert {i.value for i in keys_only} == {b""}


async def test_nothing_there_is_an_empty_answer(nc: Client, prefix: str) -> None:
    kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=prefix))
    assert await latest(kv, "dev.nobody.*") == []
    await kv.put("dev.x.s1", b"1")
    await kv.delete("dev.x.s1")
    assert await latest(kv, "dev.x.*") == []  # only a delete marker left


async def test_existing_keys_are_never_scanned_as_empty(
    nc: Client, prefix: str
) -> None:
    kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=prefix))
    for device in range(4):
        await kv.put(f"dev.d{device}.s", b"x")
    for scan in range(300):  # nats.py's watch lost this race in 1 of 5 such runs
        assert len(await latest(kv, f"dev.d{scan % 4}.*")) == 1, scan
