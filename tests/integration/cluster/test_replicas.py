"""On a real 3-node cluster: declarations honour AGENTBUS_JS_REPLICAS and raise an
existing R1 stream, bucket or object store to it; services ride out a dead node."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, ObjectStoreConfig, StorageType, StreamConfig

from eventstore.streams import ensure_kv, ensure_object_store, ensure_stream
from services.common.natsconn import connect_nats
from tests.integration.cluster.conftest import Cluster

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[Client]:
    nc = await connect_nats(
        cluster.url, "test", user="admin", password=cluster.creds["admin"]
    )
    yield nc
    await nc.close()


def _name() -> str:
    return "t" + uuid.uuid4().hex[:8]


async def test_existing_r1_stream_kv_and_object_store_are_raised_to_r3(
    admin: Client,
) -> None:
    js = admin.jetstream()
    name = _name()
    stream = StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.FILE)
    await ensure_stream(js, stream, replicas=1)
    await ensure_kv(js, KeyValueConfig(bucket=name, history=1), replicas=1)
    await ensure_object_store(js, ObjectStoreConfig(bucket=name), replicas=1)
    for declared in (f"KV_{name}", f"OBJ_{name}", name):
        assert (await js.stream_info(declared)).config.num_replicas == 1
    await ensure_stream(js, stream, replicas=3)
    kv = await ensure_kv(js, KeyValueConfig(bucket=name, history=1), replicas=3)
    await ensure_object_store(js, ObjectStoreConfig(bucket=name), replicas=3)
    for declared in (f"KV_{name}", f"OBJ_{name}", name):
        assert (await js.stream_info(declared)).config.num_replicas == 3
        await _until_led_by_three(admin, declared)
    await kv.put("k", b"v")
    assert (await kv.get("k")).value == b"v"


async def test_the_setting_applies_where_no_count_is_passed(
    admin: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTBUS_JS_REPLICAS", "3")
    js = admin.jetstream()
    name = _name()
    await ensure_kv(js, KeyValueConfig(bucket=name, history=1))
    assert (await js.stream_info(f"KV_{name}")).config.num_replicas == 3
    monkeypatch.setenv("AGENTBUS_JS_REPLICAS", "seven")
    with pytest.raises(ValueError, match="AGENTBUS_JS_REPLICAS"):
        await ensure_kv(js, KeyValueConfig(bucket=name, history=1))


async def test_a_client_given_every_node_keeps_appending_when_one_dies(
    cluster: Cluster, admin: Client
) -> None:
    js = admin.jetstream()
    name = _name()
    await ensure_stream(js, StreamConfig(name=name, subjects=[f"{name}.>"]), replicas=3)
    acked = [await js.publish(f"{name}.a", b"0")]
    victim = admin.connected_server_version and admin._current_server
    assert victim is not None
    port = victim.uri.port
    dead = next(n for n in cluster.nodes if n.port == port)
    cluster.kill(dead.name)
    try:
        async with asyncio.timeout(30):
            while len(acked) < 20:
                try:
                    acked.append(await js.publish(f"{name}.a", b"x", timeout=2))
                except Exception:
                    await asyncio.sleep(0.1)
        info = await js.stream_info(name)
        assert info.state.messages == len(acked)
        assert sorted(a.seq for a in acked) == list(range(1, len(acked) + 1))
    finally:
        cluster.start(dead)


async def _until_led_by_three(nc: Client, stream: str) -> None:
    """A leader and two followers (the new peers catch up after the update)."""
    js = nc.jetstream()
    async with asyncio.timeout(20):
        while True:
            cluster = (await js.stream_info(stream)).cluster
            if cluster and cluster.leader and len(cluster.replicas or []) == 2:
                return
            await asyncio.sleep(0.1)
