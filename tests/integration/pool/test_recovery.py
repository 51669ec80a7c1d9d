"""Crashes: a worker SIGKILLed mid-turn, a pool killed whole, two pools sharing."""

from __future__ import annotations

import os
import signal
from datetime import datetime

import msgspec

from eventstore.audit_source import audit_nats
from eventstore.settings import EventStoreSettings
from schemas.events import Event, WorkerAssigned, WorkerReleased
from services.pool.lease import Lease
from tests.integration.pool.harness import Harness

LONG = " ".join(f"w{i}" for i in range(400))


def assignments(events: list[Event]) -> list[WorkerAssigned]:
    return [e.data for e in events if isinstance(e.data, WorkerAssigned)]


async def test_sigkilled_worker_ends_the_turn_worker_lost_and_a_fresh_worker_goes_on(
    harness: Harness,
) -> None:
    running = await harness.pool(pool_workers=1, scripted_token_delay_s=0.02)
    sid = await harness.session()
    _, first = await harness.script(sid, {"say": LONG})
    assigned = await harness.wait_for(sid, lambda e: e.type == "worker.assigned")
    await harness.wait_for(sid, lambda e: e.type == "agent.message.delta")
    os.kill(assigned.data.pid, signal.SIGKILL)
    ended = await harness.ended(sid, first)
    assert ended.data.stop_reason == "worker_lost"
    assert ended.actor.startswith("pool:")
    _, second = await harness.script(sid, {"say": "still here"})
    assert (await harness.ended(sid, second)).data.stop_reason == "end_turn"
    events = await harness.events(sid)
    workers = [a.worker_id for a in assignments(events)]
    assert len(workers) == 2
    assert workers[0] != workers[1]
    released = [e.data for e in events if isinstance(e.data, WorkerReleased)]
    assert released[0].worker_id == workers[0]
    assert released[0].reason == "worker_lost"
    # Recovery appended through the one append path: the chain verifies.
    report = await audit_nats(
        EventStoreSettings(nats_url=harness.url, bus_prefix=harness.names.prefix), sid
    )
    assert report.ok, report.problems
    assert report.summary.status == "idle"
    # The pool refilled: one live worker, not the killed one.
    await harness.until(lambda: len(running.pool.workers) == 1)
    assert running.pool.workers[0].pid != assigned.data.pid


async def test_pool_killed_whole_mid_turn_then_restarted_serves_the_queued_prompt(
    harness: Harness,
) -> None:
    first_pool = harness.pool_process(pool_workers=1, scripted_token_delay_s=0.02)
    sid = await harness.session()
    _, lost = await harness.script(sid, {"say": LONG})
    await harness.wait_for(sid, lambda e: e.type == "agent.message.delta", timeout=60)
    first_pool.kill()
    _, queued = await harness.script(sid, {"say": "after the restart"})
    harness.pool_process(pool_workers=1)
    ended = await harness.ended(sid, lost, timeout=60)
    assert ended.data.stop_reason == "worker_lost"
    served = await harness.ended(sid, queued, timeout=60)
    assert served.data.stop_reason == "end_turn"
    texts = [
        e.data.text for e in await harness.events(sid) if e.type == "agent.message"
    ]
    assert texts[-1] == "after the restart"


async def test_a_dead_pools_lease_on_this_host_is_recovered_before_it_expires(
    harness: Harness,
) -> None:
    # `agentbus up` SIGKILLed and started again: the new pool sees that the old
    # lease's worker ran here and is gone, so it does not wait out the TTL.
    slow = {"pool_lease_ttl_s": 30.0, "scripted_token_delay_s": 0.02}
    first_pool = harness.pool_process(pool_workers=1, **slow)
    sid = await harness.session()
    _, lost = await harness.script(sid, {"say": LONG})
    await harness.wait_for(sid, lambda e: e.type == "agent.message.delta", timeout=60)
    kv = await harness.nc.jetstream().key_value(harness.names.leases_bucket)
    dead = msgspec.json.decode((await kv.get(sid)).value, type=Lease)
    first_pool.kill()
    harness.pool_process(pool_workers=1, **slow)
    ended = await harness.ended(sid, lost, timeout=60)
    assert ended.data.stop_reason == "worker_lost"
    assert datetime.fromisoformat(ended.ts).timestamp() < dead.expires_at


async def test_two_pools_share_the_load(harness: Harness) -> None:
    fast = {"scripted_token_delay_s": 0.01, "pool_idle_release_s": 0.2}
    one = await harness.pool(pool_workers=1, **fast)
    two = await harness.pool(pool_workers=1, **fast)
    sessions = [await harness.session() for _ in range(4)]
    turns = [(await harness.script(sid, {"say": LONG[:400]}))[1] for sid in sessions]
    workers: set[str] = set()
    for sid, turn in zip(sessions, turns, strict=True):
        assert (await harness.ended(sid, turn)).data.stop_reason == "end_turn"
        workers |= {a.worker_id for a in assignments(await harness.events(sid))}
    mine = {w.worker_id for w in one.pool.workers}
    theirs = {w.worker_id for w in two.pool.workers}
    assert workers & mine
    assert workers & theirs


async def test_a_stopping_pool_drains_then_hands_queued_prompts_to_the_next_pool(
    harness: Harness,
) -> None:
    first = await harness.pool(pool_drain_s=0.3, scripted_token_delay_s=0.02)
    sid = await harness.session()
    _, running = await harness.script(sid, {"say": LONG})
    await harness.wait_for(sid, lambda e: e.type == "agent.message.delta")
    _, queued = await harness.script(sid, {"say": "for the next pool"})
    await first.stop()
    ended = await harness.ended(sid, running)
    assert ended.data.stop_reason == "worker_lost"
    released = await harness.wait_for(sid, lambda e: isinstance(e.data, WorkerReleased))
    assert released.data.reason == "pool_stopping"
    await harness.pool()
    assert (await harness.ended(sid, queued)).data.stop_reason == "end_turn"
