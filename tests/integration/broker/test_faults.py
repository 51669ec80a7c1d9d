"""Faults are answered, not waited out: retried requests, short leases."""

from __future__ import annotations

import asyncio
import signal
import time

import msgspec
import pytest
from nats.aio.msg import Msg

from schemas.broker import BindReply, BindRequest
from services.broker.client import bind
from services.broker.errors import BindRefusedError
from services.common.request import NoAnswerError, answering, ask
from tests.integration.broker.harness import Harness
from tests.integration.broker.test_replicas import _answering, _spawn_broker
from tests.support.eventually import eventually


async def test_a_slow_answer_is_kept_alive_by_progress(harness: Harness) -> None:
    nc, subject = harness.nc, harness.names.prefix + ".t.slow"
    release = asyncio.Event()

    async def slow(msg: Msg) -> None:
        async with answering(nc, msg):
            await release.wait()
        await msg.respond(b"done")

    sub = await nc.subscribe(subject, "q", cb=slow)
    try:
        pending = asyncio.create_task(ask(nc, subject, b"x", silence_s=1.0))
        await asyncio.sleep(3.2)  # three silences long: only progress keeps it
        assert not pending.done()
        release.set()
        assert (await pending).data == b"done"
    finally:
        await sub.unsubscribe()


async def test_a_silent_replica_is_given_up_and_another_answers(
    harness: Harness,
) -> None:
    nc, subject = harness.nc, harness.names.prefix + ".t.dead"
    heard: list[str] = []

    async def dead(msg: Msg) -> None:
        heard.append("dead")  # took the request, then "died": never answers

    async def live(msg: Msg) -> None:
        heard.append("live")
        await msg.respond(b"ok")

    subs = [
        await nc.subscribe(subject, "q", cb=dead),
        await nc.subscribe(subject, "q", cb=live),
    ]
    try:
        for _ in range(6):
            msg = await ask(nc, subject, b"x", silence_s=0.3, total_s=20)
            assert msg.data == b"ok"
        assert "live" in heard
    finally:
        for sub in subs:
            await sub.unsubscribe()


async def test_no_replica_at_all_is_a_bounded_no_responders(harness: Harness) -> None:
    with pytest.raises(NoAnswerError) as info:
        await ask(harness.nc, harness.names.prefix + ".t.none", b"", total_s=0.5)
    assert info.value.reason == "no_responders"
    assert info.value.tries > 1
    with pytest.raises(BindRefusedError) as refused:
        await bind(harness.nc, harness.names, "w", "t", timeout=0.5)
    assert refused.value.code == "broker_unavailable"


async def test_a_retried_bind_gets_the_same_grant_and_a_reuse_is_refused(
    harness: Harness,
) -> None:
    await harness.replica()
    token = await harness.assign("wi", "idem")
    req = BindRequest(worker_id="wi", token=token, request_id="r-1")
    body = msgspec.json.encode(req)
    first = msgspec.json.decode(
        (await harness.nc.request(harness.names.broker_bind, body, 30)).data,
        type=BindReply,
    )
    again = msgspec.json.decode(
        (await harness.nc.request(harness.names.broker_bind, body, 30)).data,
        type=BindReply,
    )
    assert first.grant is not None
    assert again.grant is not None
    assert again.grant.next_token == first.grant.next_token
    assert again.grant.sandbox_id == first.grant.sandbox_id
    other = msgspec.json.encode(
        BindRequest(worker_id="wi", token=token, request_id="r-2")
    )
    reuse = msgspec.json.decode(
        (await harness.nc.request(harness.names.broker_bind, other, 30)).data,
        type=BindReply,
    )
    assert reuse.refused is not None
    assert reuse.refused.code == "token_reused"
    nxt = await bind(harness.nc, harness.names, "wi", first.grant.next_token)
    assert nxt.sandbox_id == first.grant.sandbox_id
    # Once the next token is used, the old request is no longer replayable.
    late = msgspec.json.decode(
        (await harness.nc.request(harness.names.broker_bind, body, 30)).data,
        type=BindReply,
    )
    assert late.refused is not None


async def test_a_bind_in_flight_on_a_killed_broker_is_answered_by_another(
    harness: Harness, nats_server: object
) -> None:
    """SIGKILL mid-create: the client's retry lands on the survivor, which
    takes the dead replica's claim over once its (renewed, short) lease ends."""
    proc = _spawn_broker(harness, nats_server.url, lease_s=3)  # type: ignore[attr-defined]
    try:
        await eventually(lambda: _answering(harness))
        harness.host.set_faults(delay_ms={"create": 1500})
        token = await harness.assign("wk2", "inflight")
        pending = asyncio.create_task(
            bind(harness.nc, harness.names, "wk2", token, timeout=30, silence_s=2)
        )
        survivor = await harness.replica(subscribe=False, broker_op_lease_s=3)
        store = survivor.life.store

        async def creating() -> bool:
            return (await store.get("inflight")).record.state == "creating"

        await eventually(creating)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()
        await survivor.subscribe(harness.stack)
        grant = await pending
        took = time.monotonic() - killed_at
    finally:
        harness.host.clear_faults()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    rec = (await store.get("inflight")).record
    assert rec.state == "running"
    assert grant.sandbox_id == rec.sandbox_id
    assert await harness.ours(survivor.life.provider) == [rec.sandbox_id]
    reasons = [r for _, r in await harness.states("inflight")]
    assert any("took over an unfinished creating" in r for r in reasons)
    print(f"bind answered {took:.2f}s after the SIGKILL")
