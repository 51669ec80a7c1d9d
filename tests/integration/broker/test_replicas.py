"""Several broker replicas: CAS keeps one sandbox per session, even across a crash."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import nats.errors
import pytest

from services.broker.client import bind
from services.broker.errors import BindRefusedError
from tests.integration.broker.harness import Harness
from tests.support.eventually import eventually

AGENTBUS = Path(sys.executable).parent / "agentbus"


async def test_two_replicas_racing_on_one_session_create_one_sandbox(
    harness: Harness,
) -> None:
    one = await harness.replica(broker_replica_id="r1")
    two = await harness.replica(broker_replica_id="r2")
    recs = await asyncio.gather(
        one.life.checked("race", "test"),
        two.life.checked("race", "test"),
        one.life.checked("race", "test"),
        two.life.checked("race", "test"),
    )
    assert len({r.sandbox_id for r in recs}) == 1
    assert await harness.ours(one.life.provider) == [recs[0].sandbox_id]
    states = [s for s, _ in await harness.states("race")]
    assert states.count("creating") == 1


async def test_binds_spread_over_replicas_share_one_sandbox(harness: Harness) -> None:
    one = await harness.replica(broker_replica_id="r1")
    await harness.replica(broker_replica_id="r2")
    tokens = [await harness.assign(f"wq{i}", "shared") for i in range(4)]
    grants = await asyncio.gather(
        *(bind(harness.nc, harness.names, f"wq{i}", t) for i, t in enumerate(tokens))
    )
    assert len({g.sandbox_id for g in grants}) == 1
    assert len(await harness.ours(one.life.provider)) == 1


def _spawn_broker(
    harness: Harness, nats_url: str, lease_s: float = 2, replica: str = "doomed"
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "AGENTBUS_NATS_URL": nats_url,
        "AGENTBUS_BUS_PREFIX": harness.names.prefix,
        "AGENTBUS_BROKER_PROVIDER": "local",
        "AGENTBUS_SANDBOXHOST_URL": harness.host.url,
        "AGENTBUS_SANDBOXHOST_API_KEY": harness.host.api_key,
        "AGENTBUS_BROKER_OP_LEASE_S": str(lease_s),
        "AGENTBUS_BROKER_REPLICA_ID": replica,
    }
    return subprocess.Popen(
        [str(AGENTBUS), "broker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def test_broker_killed_mid_create_leaves_exactly_one_sandbox(
    harness: Harness, nats_server: object
) -> None:
    # The survivor runs its sweep and reconciler loops from the start but does
    # not take binds until the crash, so the doomed process gets this one.
    survivor = await harness.replica(
        subscribe=False,
        broker_replica_id="survivor",
        broker_op_lease_s=2,
        broker_sweep_s=0.2,
        broker_reconcile_s=0.5,
        sandbox_idle_pause_s=60,
    )
    store, provider = survivor.life.store, survivor.life.provider
    stop = asyncio.Event()
    loops = [
        asyncio.create_task(survivor.sweep_loop(stop)),
        asyncio.create_task(survivor.reconcile_loop(stop)),
    ]
    proc = _spawn_broker(harness, nats_server.url)  # type: ignore[attr-defined]
    try:
        await eventually(lambda: _answering(harness))
        harness.host.set_faults(delay_ms={"create": 1500})
        token = await harness.assign("wk", "crash")
        pending = asyncio.create_task(
            bind(harness.nc, harness.names, "wk", token, timeout=4)
        )

        async def creating() -> bool:
            return (await store.get("crash")).record.state == "creating"

        await eventually(creating)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        with pytest.raises(BindRefusedError):
            await pending
        harness.host.clear_faults()

        async def settled_with_one() -> bool:
            rec = (await store.get("crash")).record
            return rec.state == "running" and await harness.ours(provider) == [
                rec.sandbox_id
            ]

        await eventually(settled_with_one)
    finally:
        stop.set()
        await asyncio.gather(*loops)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    await survivor.subscribe(harness.stack)
    rec = (await store.get("crash")).record
    grant = await bind(harness.nc, harness.names, "wk", token)
    assert grant.sandbox_id == rec.sandbox_id
    assert await harness.ours(provider) == [rec.sandbox_id]


async def _answering(harness: Harness) -> bool:
    try:
        await harness.nc.request(harness.names.broker_bind, b"{}", timeout=1)
    except nats.errors.NoRespondersError:
        return False
    return True


async def test_a_live_replica_keeps_its_lease_through_a_slow_create(
    harness: Harness,
) -> None:
    one = await harness.replica(broker_replica_id="slow", broker_op_lease_s=0.6)
    two = await harness.replica(broker_replica_id="eager", broker_op_lease_s=0.6)
    harness.host.set_faults(delay_ms={"create": 1500})
    first = asyncio.create_task(one.life.checked("slow", "test"))

    async def claimed() -> bool:
        return (await one.life.store.get("slow")).record.state == "creating"

    await eventually(claimed)
    second = await two.life.checked("slow", "test")
    assert (await first).sandbox_id == second.sandbox_id
    reasons = [r for _, r in await harness.states("slow")]
    assert not any("took over" in r for r in reasons)
    assert len(await harness.ours(one.life.provider)) == 1


@pytest.mark.parametrize(
    ("stale", "provider_paused", "expected"),
    [
        ("pausing", True, "paused"),
        ("pausing", False, "running"),
        ("archiving", True, "paused"),
        ("resuming", True, "running"),
    ],
)
async def test_an_abandoned_claim_is_finished_from_the_providers_truth(
    harness: Harness, stale: str, provider_paused: bool, expected: str
) -> None:
    broker = await harness.replica()
    token = await harness.assign("wz", "ghost")
    grant = await bind(harness.nc, harness.names, "wz", token)
    if provider_paused:
        await broker.life.provider.pause(grant.sandbox_id)
    store = broker.life.store
    cur = await store.get("ghost")
    dead = msgspec.structs.replace(
        cur.record, state=stale, owner="dead-replica", lease_until=time.time() - 1
    )
    assert await store.put(cur, dead) is not None
    await broker.reaper.sweep_once()
    rec = (await store.get("ghost")).record
    assert rec.state == expected
    assert rec.sandbox_id == grant.sandbox_id
    assert not rec.owner
