"""Timers (T2 idle pause, T3 archive), activity, and the reconciler."""

from __future__ import annotations

import asyncio
import time

from services.broker.client import bind, report_activity
from services.envd import EnvdClient
from tests.integration.broker.harness import Harness
from tests.support.eventually import eventually


async def test_sweep_pauses_after_idle_then_archives_after_paused(
    harness: Harness,
) -> None:
    now = [time.time()]
    broker = await harness.replica(
        sandbox_idle_pause_s=600, sandbox_archive_after_s=3600, clock=lambda: now[0]
    )
    token = await harness.assign("wt1", "idle")
    grant = await bind(harness.nc, harness.names, "wt1", token)
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.write_bytes("/workspace/x.txt", b"x")
    store = broker.life.store

    async def swept_at(offset: float) -> str:
        now[0] += offset
        await broker.reaper.sweep_once()
        return (await store.get("idle")).record.state

    assert await swept_at(599) == "running"
    assert await swept_at(1) == "paused"
    assert await swept_at(3599) == "paused"
    assert await swept_at(1) == "archived"
    rec = (await store.get("idle")).record
    assert rec.last_archive  # the dirty workspace was saved before deletion
    assert grant.sandbox_id not in await harness.ours(broker.life.provider)
    states = [s for s, _ in await harness.states("idle")]
    assert states[-3:] == ["pausing", "paused", "archived"]


async def test_activity_postpones_the_idle_pause(harness: Harness) -> None:
    now = [time.time()]
    broker = await harness.replica(sandbox_idle_pause_s=600, clock=lambda: now[0])
    token = await harness.assign("wt2", "busy")
    await bind(harness.nc, harness.names, "wt2", token)
    store = broker.life.store
    before = (await store.get("busy")).record.last_active
    now[0] += 400
    await report_activity(harness.nc, harness.names, "busy", "model", "wt2")

    async def touched() -> bool:
        return (await store.get("busy")).record.last_active > before

    await eventually(touched)
    now[0] += 300  # past T2 since the bind, not since the activity
    await broker.reaper.sweep_once()
    assert (await store.get("busy")).record.state == "running"
    now[0] += 301  # past T2 since the activity too
    await broker.reaper.sweep_once()
    assert (await store.get("busy")).record.state == "paused"


async def test_a_running_tool_is_never_paused_under_it(harness: Harness) -> None:
    now = [time.time()]
    broker = await harness.replica(sandbox_idle_pause_s=10, clock=lambda: now[0])
    token = await harness.assign("wt7", "tool")
    await bind(harness.nc, harness.names, "wt7", token)
    store = broker.life.store
    await report_activity(harness.nc, harness.names, "tool", "tool", "wt7", 60)

    async def held() -> bool:
        return (await store.get("tool")).record.busy_until > now[0]

    await eventually(held)
    now[0] += 59  # far past T2, inside the tool's hold
    await broker.reaper.sweep_once()
    assert not await broker.reaper.pause("tool", "idle", 10)
    assert (await store.get("tool")).record.state == "running"
    now[0] += 2  # the tool stopped renewing: T2 applies again
    await broker.reaper.sweep_once()
    assert (await store.get("tool")).record.state == "paused"


async def test_reconciler_kills_orphans_and_marks_vanished_sandboxes(
    harness: Harness,
) -> None:
    broker = await harness.replica()
    provider = broker.life.provider
    meta = {"agentbus_prefix": harness.names.prefix, "agentbus_session": "nobody"}
    orphan = await provider.create(meta, f"{harness.names.prefix}-orphan")
    token = await harness.assign("wt3", "gone")
    grant = await bind(harness.nc, harness.names, "wt3", token)
    await provider.kill(grant.sandbox_id)
    killed, vanished = await broker.reconciler.run_once()
    assert killed == [orphan.sandbox_id]
    assert vanished == ["gone"]
    assert await harness.ours(provider) == []
    again = await bind(harness.nc, harness.names, "wt3", grant.next_token)
    assert again.sandbox_id != grant.sandbox_id
    assert again.rebuilt


async def test_the_first_reconcile_pass_comes_soon_after_start_not_a_period_later(
    harness: Harness,
) -> None:
    # A broker that died mid-create left this; the next one cleans it at once.
    broker = await harness.replica(
        broker_reconcile_s=3600, broker_reconcile_first_s=0.05
    )
    provider = broker.life.provider
    meta = {"agentbus_prefix": harness.names.prefix, "agentbus_session": "nobody"}
    await provider.create(meta, f"{harness.names.prefix}-left")
    stop = asyncio.Event()
    loop = asyncio.create_task(broker.reconcile_loop(stop))
    try:

        async def none_left() -> bool:
            return await harness.ours(provider) == []

        await eventually(none_left, timeout=10)
    finally:
        stop.set()
        await loop


async def test_deleted_sessions_lose_their_archives_after_the_retention(
    harness: Harness,
) -> None:
    broker = await harness.replica(sandbox_archive_retention_s=0.0)
    token = await harness.assign("wt4", "old")
    await bind(harness.nc, harness.names, "wt4", token)
    assert await broker.reaper.save("old")
    archiver = broker.files.archiver
    assert await archiver.store.names("old/")
    assert await broker.reaper.delete("old", "session closed")
    await broker.reaper.sweep_once()
    assert await archiver.store.names("old/") == []
    rec = (await broker.life.store.get("old")).record
    assert rec.state == "deleted"
    assert rec.last_archive is None


async def test_a_workspace_that_cannot_be_saved_is_never_deleted(
    harness: Harness,
) -> None:
    broker = await harness.replica()
    token = await harness.assign("wt5", "unsaved")
    grant = await bind(harness.nc, harness.names, "wt5", token)
    assert await broker.reaper.pause("unsaved", "idle")
    harness.host.set_faults(fail_resumes=1)
    assert not await broker.reaper.archive("unsaved", "paused too long")
    rec = (await broker.life.store.get("unsaved")).record
    assert rec.state == "paused"
    assert rec.sandbox_id == grant.sandbox_id
    info = await broker.life.provider.describe(grant.sandbox_id)
    assert info is not None
    assert await broker.reaper.archive("unsaved", "paused too long")


async def test_a_clean_paused_workspace_is_archived_without_waking_it(
    harness: Harness,
) -> None:
    broker = await harness.replica()
    token = await harness.assign("wt6", "clean")
    await bind(harness.nc, harness.names, "wt6", token)
    assert await broker.reaper.save("clean")
    assert await broker.reaper.pause("clean", "idle")
    harness.host.set_faults(fail_resumes=5)  # any resume would fail the archive
    assert await broker.reaper.archive("clean", "paused too long")
    assert (await broker.life.store.get("clean")).record.state == "archived"
