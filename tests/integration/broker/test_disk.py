"""Disk bounds on the broker side: sparse archives, archive and store limits."""

from __future__ import annotations

import os

import pytest

from services.broker.archive import SCRATCH, ArchiveLimitError
from services.broker.client import bind
from services.envd import EnvdClient
from tests.integration.broker.harness import Harness

TWO_GB = 2 << 30


async def _grant(harness: Harness, worker: str, sid: str):  # type: ignore[no-untyped-def]
    token = await harness.assign(worker, sid)
    return await bind(harness.nc, harness.names, worker, token)


async def test_a_sparse_file_costs_its_blocks_not_its_size(harness: Harness) -> None:
    broker = await harness.replica()
    grant = await _grant(harness, "wsp", "sparse")
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        assert (await c.run("truncate -s 2G /workspace/big")).exit_code == 0
    manifest = await broker.reaper.save("sparse")
    archiver = broker.files.archiver
    m = await archiver.load(manifest or "")
    assert m.entries["big"].size == TWO_GB
    info = await archiver.store.obj.get_info(m.layers[-1].name)  # type: ignore[attr-defined]
    assert int(info.size or 0) < 1 << 20
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        assert (await c.run("touch /workspace/big")).exit_code == 0
    again = await archiver.load(await broker.reaper.save("sparse") or "")
    touched = await archiver.store.obj.get_info(again.layers[-1].name)  # type: ignore[attr-defined]
    assert int(touched.size or 0) < 1 << 20
    # Rebuilt from the archive, the file is sparse again.
    assert await broker.reaper.pause("sparse", "idle")
    assert await broker.reaper.archive("sparse", "test")
    grant = await bind(harness.nc, harness.names, "wsp", grant.next_token)
    assert grant.rebuilt
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        out = (await c.run("stat -c '%s %b %B' /workspace/big")).stdout.split()
    size, blocks, unit = (int(x) for x in out)
    assert size == TWO_GB
    assert blocks * unit < 1 << 20


async def test_a_layer_over_the_archive_limit_is_refused_and_left_nowhere(
    harness: Harness,
) -> None:
    broker = await harness.replica(broker_archive_max_mb=0.1)
    grant = await _grant(harness, "wbig", "biglayer")
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.write_bytes("/workspace/noise.bin", os.urandom(300_000))
        with pytest.raises(ArchiveLimitError) as info:
            await broker.reaper.save("biglayer")
        left = (await c.run(f"ls -A {SCRATCH}")).stdout.split()
    assert info.value.code == "archive_too_large"
    # Neither the listing nor the cut tar stays in the sandbox.
    assert [n for n in left if n.startswith(b"l0")] == []
    assert left  # the listing ran (the identity file is there)
    assert await broker.files.archiver.store.names("biglayer/") == []
    assert (await broker.life.store.get("biglayer")).record.last_archive is None


async def test_t3_over_the_limit_keeps_the_sandbox_and_waits_a_whole_t3(
    harness: Harness,
) -> None:
    now = [1_000_000.0]
    broker = await harness.replica(broker_archive_max_mb=0.1, clock=lambda: now[0])
    grant = await _grant(harness, "wt3", "t3big")
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.write_bytes("/workspace/noise.bin", os.urandom(300_000))
    assert await broker.reaper.pause("t3big", "idle")
    now[0] += 10
    assert not await broker.reaper.archive("t3big", "paused too long")
    rec = (await broker.life.store.get("t3big")).record
    assert (rec.state, rec.sandbox_id, rec.paused_at) == (
        "paused",
        grant.sandbox_id,
        now[0],
    )
    assert "archive_too_large" in rec.reason


async def test_a_full_archive_store_refuses_with_a_named_code(
    harness: Harness,
) -> None:
    broker = await harness.replica(broker_archive_store_max_mb=0.2)
    grant = await _grant(harness, "wfull", "full")
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.write_bytes("/workspace/noise.bin", os.urandom(300_000))
    with pytest.raises(ArchiveLimitError) as info:
        await broker.reaper.save("full")
    assert info.value.code == "archive_store_full"
    assert await broker.files.archiver.store.names("full/") == []


async def test_a_turn_end_save_over_the_limit_is_not_redelivered(
    harness: Harness,
) -> None:
    import asyncio

    import nats.errors

    from schemas.events import TurnEnded
    from services.broker.feed import _consumer, _handle

    broker = await harness.replica(broker_archive_max_mb=0.1)
    sub = await _consumer(harness.nc, harness.names, asyncio.Event())
    grant = await _grant(harness, "wfe", "feedbig")
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.write_bytes("/workspace/noise.bin", os.urandom(300_000))
    await harness.log.append(
        "feedbig", TurnEnded(turn_id="t1", stop_reason="end_turn"), actor="worker"
    )
    msgs = await sub.fetch(1, timeout=10)  # type: ignore[attr-defined]
    for msg in msgs:
        await _handle(msg, harness.names, broker.reaper)
    with pytest.raises((TimeoutError, nats.errors.TimeoutError)):
        await sub.fetch(1, timeout=3)  # type: ignore[attr-defined]
    await sub.unsubscribe()  # type: ignore[attr-defined]
    assert (await broker.life.store.get("feedbig")).record.last_archive is None
