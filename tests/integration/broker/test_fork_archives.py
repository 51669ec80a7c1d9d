"""A fork shares its parent's archive layers: forgetting the parent keeps them."""

from __future__ import annotations

from schemas.broker import ForkRequest
from services.broker.client import bind
from services.broker.forks import record_turn_save
from services.envd import EnvdClient
from tests.integration.broker.harness import Harness


async def _write(harness: Harness, worker: str, sid: str, files: dict) -> None:
    token = await harness.assign(worker, sid)
    grant = await bind(harness.nc, harness.names, worker, token)
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        for path, data in files.items():
            await c.write_bytes(f"/workspace/{path}", data)
    await harness.release(worker)


async def test_fork_restores_after_its_parent_is_forgotten_and_the_last_one_out_cleans(
    harness: Harness,
) -> None:
    broker = await harness.replica()
    store = broker.files.archiver.store
    await _write(harness, "wp1", "par", {"a.txt": b"one", "b.txt": b"bee"})
    await broker.reaper.save("par")
    await _write(harness, "wp2", "par", {"a.txt": b"two"})
    manifest = await broker.reaper.save("par")
    assert manifest is not None
    await record_turn_save(store, "par", 7, manifest)
    reply = await broker.forks.fork(
        ForkRequest(parent_session_id="par", session_id="kid", at_seq=9)
    )
    assert reply.manifest == manifest
    await broker.reaper.delete("par", "closed")
    await broker.files.archiver.forget("par")
    left = set(await store.names("par/"))
    assert "par/forgotten" in left
    assert "par/t0000000007" not in left, "what no fork names is deleted"
    assert {manifest, "par/l000001.tar", "par/l000002.tar"} <= left

    token = await harness.assign("wk", "kid")
    grant = await bind(harness.nc, harness.names, "wk", token)
    assert grant.rebuilt, "the fork's sandbox is built from the parent's layers"
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        assert await c.read_bytes("/workspace/a.txt") == b"two"
        assert await c.read_bytes("/workspace/b.txt") == b"bee"
        await c.write_bytes("/workspace/c.txt", b"sea")
    kid_manifest = await broker.reaper.save("kid")
    names = [
        layer.name
        for layer in (await broker.files.archiver.load(kid_manifest or "")).layers
    ]
    assert names[:2] == ["par/l000001.tar", "par/l000002.tar"]
    kid_layers = (await broker.files.archiver.load(kid_manifest or "")).layers
    assert kid_layers[-1].paths == ["c.txt"], "restored files scan as unchanged"

    await broker.reaper.delete("kid", "closed")
    await broker.files.archiver.forget("kid")
    assert await store.names("kid/") == []
    assert await store.names("par/") == [], "the last one out deleted the parent's"
