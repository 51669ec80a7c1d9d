"""Bind: the pool's assignment record and token, token rotation, rebuilt notice.

A fake broker answers binds on NATS the way the real one does (schemas.broker).
"""

from __future__ import annotations

import hashlib
import time

import msgspec
from nats.aio.msg import Msg

from schemas.broker import Assignment, BindGrant, BindReply, BindRequest
from schemas.events import ToolResult, TurnEnded
from services.pool.sandbox import REBUILT_NOTICE
from tests.integration.pool.harness import Harness


async def test_binds_use_the_assigned_then_the_rotated_token_and_relay_a_rebuild(
    harness: Harness,
) -> None:
    requests: list[BindRequest] = []
    token_matches: list[bool] = []
    js = harness.nc.jetstream()

    async def broker(msg: Msg) -> None:
        request = msgspec.json.decode(msg.data, type=BindRequest)
        requests.append(request)
        kv = await js.key_value(harness.names.assignments_bucket)
        record = msgspec.json.decode(
            (await kv.get(request.worker_id)).value or b"", type=Assignment
        )
        digest = hashlib.sha256(request.token.encode()).hexdigest()
        token_matches.append(digest == record.token_sha256)
        grant = BindGrant(
            session_id=record.session_id,
            sandbox_id="sb_fake",
            envd_url="http://127.0.0.1:9",  # nothing listens: the tool fails
            access_token="tok",
            expires_at=time.time() + 600,
            next_token=f"next-{len(requests)}",
            rebuilt=len(requests) == 2,
        )
        await msg.respond(msgspec.json.encode(BindReply(grant=grant)))

    sub = await harness.nc.subscribe(harness.names.broker_bind, cb=broker)
    try:
        # No retries: this test counts binds (one per turn); a refused
        # connection would otherwise be retried within the window.
        await harness.pool(pool_tool_retry_window_s=0)
        sid = await harness.session()
        ls = {"tool": "ls", "args": {"path": "."}}
        _, first = await harness.script(sid, ls)
        await harness.ended(sid, first)
        _, second = await harness.script(sid, ls)
        await harness.ended(sid, second)
    finally:
        await sub.unsubscribe()
    kv = await js.key_value(harness.names.assignments_bucket)
    record = msgspec.json.decode(
        (await kv.get(requests[0].worker_id)).value or b"", type=Assignment
    )
    assert record.session_id == sid
    assert len(requests) == 2
    first_token = requests[0].token
    assert requests[1].token == "next-1"
    assert first_token != "next-1"
    results = [
        e.data for e in await harness.events(sid) if isinstance(e.data, ToolResult)
    ]
    assert not results[0].output.startswith(REBUILT_NOTICE)
    assert results[1].output.startswith(REBUILT_NOTICE)
    # The first bind presents the token whose hash the pool put in the record.
    assert token_matches[0]


async def test_an_exhausted_retry_carries_the_infrastructure_code(
    harness: Harness,
) -> None:
    binds = 0

    async def broker(msg: Msg) -> None:
        nonlocal binds
        binds += 1
        request = msgspec.json.decode(msg.data, type=BindRequest)
        grant = BindGrant(
            session_id="",
            sandbox_id="sb_down",
            envd_url="http://127.0.0.1:9",  # the sandbox host is "restarting"
            access_token="tok",
            expires_at=time.time() + 600,
            next_token=request.token + "x",
        )
        await msg.respond(msgspec.json.encode(BindReply(grant=grant)))

    sub = await harness.nc.subscribe(harness.names.broker_bind, cb=broker)
    try:
        await harness.pool(pool_tool_retry_window_s=1.0)
        sid = await harness.session()
        _, turn = await harness.script(
            sid, {"tool": "read", "args": {"path": "x.txt"}}, {"say": "done"}
        )
        ended = await harness.ended(sid, turn)
    finally:
        await sub.unsubscribe()
    results = [
        e.data for e in await harness.events(sid) if isinstance(e.data, ToolResult)
    ]
    assert len(results) == 1
    assert not results[0].ok
    assert results[0].error_code == "infrastructure_unavailable"
    assert binds > 1  # retried (each try binds again: the binding went stale)
    assert isinstance(ended.data, TurnEnded)
    assert ended.data.infrastructure_degraded
    assert ended.data.stop_reason == "end_turn"


async def test_a_failed_activity_report_is_counted_and_retried(
    harness: Harness, nats_server: object
) -> None:
    import asyncio

    import nats

    from services.pool.sandbox import SandboxBinding

    closed = await nats.connect(nats_server.url)  # type: ignore[attr-defined]
    await closed.close()  # every publish on it fails
    binding = SandboxBinding(
        closed,
        harness.names,
        worker_id="w",
        session_id="s",
        token="t",
        activity_interval_s=0.1,
    )
    async with binding.activity("tool"):
        async with asyncio.timeout(10):
            while binding.activity_failures < 2:
                await asyncio.sleep(0.01)
    assert binding.activity_failures >= 2  # logged and retried, not swallowed


async def test_back_to_back_steps_report_their_activity_once_per_kind(
    harness: Harness,
) -> None:
    import asyncio

    from schemas.broker import Activity
    from services.broker.client import activity_subject
    from services.pool.sandbox import SandboxBinding

    reports: list[tuple[str, float]] = []
    arrived = asyncio.Condition()

    async def got(msg: Msg) -> None:
        act = msgspec.json.decode(msg.data, type=Activity)
        async with arrived:
            reports.append((act.kind, act.hold_s))
            arrived.notify_all()

    sub = await harness.nc.subscribe(activity_subject(harness.names), cb=got)
    binding = SandboxBinding(
        harness.nc, harness.names, worker_id="w", session_id="s", token="t",
        activity_interval_s=600.0,  # no periodic beat in this test: 60 s gap
    )  # fmt: skip
    try:
        for kind in ("model", "tool", "model", "tool", "tool"):
            async with binding.activity(kind):
                await harness.nc.flush()  # the step's own report, if any, is out
        # A marker after them on the same connection: it arrives after them all.
        marker = Activity(session_id="marker", kind="file")
        await harness.nc.publish(
            activity_subject(harness.names), msgspec.json.encode(marker)
        )
        async with asyncio.timeout(10), arrived:
            await arrived.wait_for(lambda: ("file", 0.0) in reports)
    finally:
        await sub.unsubscribe()
    # Each kind once: the first model step, and the first tool with its hold.
    assert reports == [("model", 0.0), ("tool", 1800.0), ("file", 0.0)]
