"""Broker lifecycle end to end on the local sandbox host, with short timers."""

from __future__ import annotations

import msgspec
import pytest

from services.broker.client import bind
from services.broker.errors import BindRefusedError
from services.broker.identity import IDENTITY_PATH
from services.envd import EnvdAuthError, EnvdClient
from tests.integration.broker.harness import Harness


async def test_first_bind_creates_then_idle_pauses_and_next_bind_resumes(
    harness: Harness,
) -> None:
    broker = await harness.replica()
    token = await harness.assign("w1", "s1")
    grant = await bind(harness.nc, harness.names, "w1", token)
    assert grant.session_id == "s1"
    assert grant.sandbox_id
    assert not grant.rebuilt
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.write_bytes("/workspace/hello.txt", b"hi")
        assert (await c.read_bytes(IDENTITY_PATH)).strip()
    assert await broker.reaper.pause("s1", "idle", 0.0)
    info = await broker.life.provider.describe(grant.sandbox_id)
    assert info is not None
    assert info.state == "paused"
    again = await bind(harness.nc, harness.names, "w1", grant.next_token)
    assert again.sandbox_id == grant.sandbox_id
    async with EnvdClient(again.envd_url, again.sandbox_id, again.access_token) as c:
        assert await c.read_bytes("/workspace/hello.txt") == b"hi"
    states = [s for s, _ in await harness.states("s1")]
    assert states == ["creating", "running", "pausing", "paused", "resuming", "running"]


async def test_resume_rotates_the_access_token_and_the_old_one_stops_working(
    harness: Harness,
) -> None:
    broker = await harness.replica()
    token = await harness.assign("w1r", "s1r")
    grant = await bind(harness.nc, harness.names, "w1r", token)
    assert await broker.reaper.pause("s1r", "idle", 0.0)
    again = await bind(harness.nc, harness.names, "w1r", grant.next_token)
    assert again.sandbox_id == grant.sandbox_id
    assert again.access_token != grant.access_token
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as old:
        with pytest.raises(EnvdAuthError):
            await old.read_bytes(IDENTITY_PATH)
    async with EnvdClient(again.envd_url, again.sandbox_id, again.access_token) as new:
        assert (await new.read_bytes(IDENTITY_PATH)).strip()


async def test_reused_one_time_token_is_refused(harness: Harness) -> None:
    await harness.replica()
    token = await harness.assign("w2", "s2")
    await bind(harness.nc, harness.names, "w2", token)
    with pytest.raises(BindRefusedError) as info:
        await bind(harness.nc, harness.names, "w2", token)
    assert info.value.code == "token_reused"


async def test_bind_after_the_assignment_ended_is_refused(harness: Harness) -> None:
    await harness.replica()
    token = await harness.assign("w3", "s3")
    await harness.release("w3")
    with pytest.raises(BindRefusedError) as info:
        await bind(harness.nc, harness.names, "w3", token)
    assert info.value.code == "assignment_ended"


async def test_a_failed_create_releases_its_claim_for_an_immediate_retry(
    harness: Harness,
) -> None:
    await harness.replica(sandboxhost_api_key="wrong", broker_op_lease_s=600)
    token = await harness.assign("w4", "s4")
    with pytest.raises(BindRefusedError) as info:
        await bind(harness.nc, harness.names, "w4", token)
    assert info.value.code == "sandbox_failed"
    await harness.stack.aclose()
    harness.stack, harness.http = type(harness.stack)(), None
    good = await harness.replica()
    rec = (await good.life.store.get("s4")).record
    assert rec.state == "failed"
    assert not rec.leased()
    grant = await bind(harness.nc, harness.names, "w4", token, timeout=10)
    assert grant.session_id == "s4"
    assert not grant.rebuilt  # it never ran: a first create, not a rebuild


async def test_a_failed_record_whose_sandbox_lives_is_resumed_not_replaced(
    harness: Harness,
) -> None:
    broker = await harness.replica()
    token = await harness.assign("w5", "s5")
    grant = await bind(harness.nc, harness.names, "w5", token)
    store = broker.life.store
    cur = await store.get("s5")
    failed = msgspec.structs.replace(cur.record, state="failed", reason="test")
    assert await store.put(cur, failed) is not None
    again = await bind(harness.nc, harness.names, "w5", grant.next_token)
    assert again.sandbox_id == grant.sandbox_id
    assert not again.rebuilt
