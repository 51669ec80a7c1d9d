"""The SSE bridge: exact replay from a cursor, live without gap or duplicate."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from eventstore.log import JetStreamLog
from schemas.events import ToolUpdate

from .conftest import auth, create_session, start_gateway
from .sse_client import SseEvent, read_event


async def append_updates(bus: JetStreamLog, sid: str, n: int, size: int = 8) -> None:
    for i in range(n):
        await bus.append(
            sid, ToolUpdate(call_id=f"c{i}", text="x" * size), actor="worker:w1"
        )


async def open_stream(http, gw, sid, device="sse", *, query="", headers=None):
    h = {**auth(device), **(headers or {})}
    return await http.get(f"{gw.base}/v1/sessions/{sid}/events{query}", headers=h)


async def events_until(resp, last_seq: int, timeout: float = 10.0) -> list[SseEvent]:
    """Events (not comments) until ``id == last_seq``."""
    out: list[SseEvent] = []
    async with asyncio.timeout(timeout):
        while True:
            ev = await read_event(resp)
            assert ev is not None, f"stream ended after {[e.id for e in out]}"
            if ev.comment:
                continue
            out.append(ev)
            if ev.id is not None and int(ev.id) >= last_seq:
                return out


def seqs(events: list[SseEvent]) -> list[int]:
    return [int(e.id) for e in events if e.event != "resync"]


async def test_replays_after_cursor_then_goes_live_without_gap_or_duplicate(
    gateway, http, bus
):
    sid = await create_session(http, gateway, "sse")
    await append_updates(bus, sid, 4)  # seqs 2..5
    resp = await open_stream(http, gateway, sid, query="?after=2")
    assert resp.headers["Content-Type"] == "text/event-stream"
    assert resp.headers["Cache-Control"] == "no-cache"
    assert resp.headers["X-Accel-Buffering"] == "no"
    first = await resp.content.readuntil(b"\n\n")
    assert first == b"retry: 2000\n\n"
    replayed = await events_until(resp, 5)
    await append_updates(bus, sid, 3)  # seqs 6..8
    live = await events_until(resp, 8)
    resp.close()
    assert seqs(replayed + live) == [3, 4, 5, 6, 7, 8]
    stored = await bus.read(sid, 2)
    assert [(e.event, e.data) for e in replayed + live] == [
        (s.type, s.raw.decode()) for s in stored
    ]


async def test_last_event_id_header_wins_over_after(gateway, http, bus):
    sid = await create_session(http, gateway, "sse")
    await append_updates(bus, sid, 4)
    resp = await open_stream(
        http, gateway, sid, query="?after=1&follow=0", headers={"Last-Event-ID": "3"}
    )
    body = await resp.text()
    assert [int(line[4:]) for line in body.splitlines() if line.startswith("id: ")] == [
        4,
        5,
    ]


async def test_follow_0_ends_after_the_replay(gateway, http, bus):
    sid = await create_session(http, gateway, "sse")
    await append_updates(bus, sid, 2)
    async with asyncio.timeout(10):
        resp = await open_stream(http, gateway, sid, query="?follow=0")
        text = await resp.text()
    assert text.count("\nevent: ") == 3
    assert "event: session.created" in text


async def test_idle_stream_gets_ping_comments(gateway, http):
    sid = await create_session(http, gateway, "sse")
    resp = await open_stream(http, gateway, sid, query="?after=1")
    async with asyncio.timeout(5):
        ev = await read_event(resp)
    resp.close()
    assert ev is not None
    assert ev.comment


async def test_future_cursor_gets_resync_first_then_live(gateway, http, bus):
    sid = await create_session(http, gateway, "sse")
    await append_updates(bus, sid, 2)  # head 3
    resp = await open_stream(http, gateway, sid, headers={"Last-Event-ID": "50"})
    resync = await events_until(resp, 3)
    assert resync[0].event == "resync"
    assert resync[0].id == "3"
    assert json.loads(resync[0].data) == {
        "reason": "cursor_ahead",
        "first_available": 1,
        "last": 3,
        "resume_after": 3,
    }
    await append_updates(bus, sid, 1)
    assert seqs(await events_until(resp, 4)) == [4]
    resp.close()


async def test_purged_range_gets_resync_then_what_is_left(gateway, http, bus):
    sid = await create_session(http, gateway, "sse")
    await append_updates(bus, sid, 5)  # 2..6
    js = bus._js
    for seq in (1, 2, 3):
        await js.purge_stream(bus.names.log_stream, subject=bus.names.log_seq(sid, seq))
    resp = await open_stream(http, gateway, sid, query="?after=0&follow=0")
    body = await resp.text()
    blocks = [b for b in body.split("\n\n") if "event:" in b]
    assert "event: resync" in blocks[0]
    data = json.loads(blocks[0].split("data: ", 1)[1])
    assert (data["reason"], data["first_available"], data["last"]) == ("purged", 4, 6)
    assert [b.split("\n")[0] for b in blocks[1:]] == ["id: 4", "id: 5", "id: 6"]


async def feeds(http, gw) -> float:
    async with http.get(f"{gw.base}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith("agentbus_gateway_feeds "):
                return float(line.split()[1])
    raise AssertionError("no feeds gauge")


async def test_clients_share_one_feed_and_disconnect_releases_it(gateway, http, bus):
    sid = await create_session(http, gateway, "sse")
    streams = [
        await open_stream(http, gateway, sid, query="?after=1") for _ in range(5)
    ]
    await append_updates(bus, sid, 1)
    for resp in streams:
        assert seqs(await events_until(resp, 2)) == [2]
    assert await feeds(http, gateway) == 1  # one JetStream tail for five clients
    for resp in streams:
        resp.close()
    async with asyncio.timeout(5):
        while await feeds(http, gateway) != 0:
            await asyncio.sleep(0.01)
    # The server drops the unsubscribed consumers too (ephemeral, no interest).
    js, stream = bus._js, bus.names.log_stream
    async with asyncio.timeout(30):
        while (await js.stream_info(stream)).state.consumer_count:
            await asyncio.sleep(0.1)


async def drain(resp, received: list[int]) -> None:
    """Read to the end; a cut-off stream raises, a clean end is reported as one."""
    async with asyncio.timeout(30):
        while (ev := await read_event(resp)) is not None:
            if not ev.comment:
                received.append(int(ev.id))
    raise aiohttp.ClientConnectionError("stream ended cleanly")


async def test_slow_client_is_cut_off_without_stalling_others(gateway, http, bus):
    sid = await create_session(http, gateway, "sse")
    slow = await open_stream(http, gateway, sid, query="?after=1")
    fast = await open_stream(http, gateway, sid, query="?after=1")
    n = 400
    appender = asyncio.create_task(append_updates(bus, sid, n, size=32_000))
    got = await events_until(fast, n + 1, timeout=60)
    await appender
    assert seqs(got) == list(range(2, n + 2))
    # The slow one was cut: it reads what was buffered, then the stream breaks.
    received: list[int] = []
    with pytest.raises((aiohttp.ClientPayloadError, aiohttp.ClientConnectionError)):
        await drain(slow, received)
    assert len(received) < n
    assert received == list(range(2, 2 + len(received)))
    async with http.get(f"{gateway.base}/metrics") as r:
        metrics = await r.text()
    assert "agentbus_gateway_sse_slow_disconnects_total 1.0" in metrics


async def test_two_gateways_serve_one_session(
    gateway, nats_server, gw_prefix, tmp_path, http
):
    other = await start_gateway(nats_server.url, gw_prefix, tmp_path)
    try:
        sid = await create_session(http, gateway, "two")
        resp = await open_stream(http, other, sid, "two", query="?after=1")
        async with http.post(
            f"{gateway.base}/v1/sessions/{sid}/prompt",
            json={"text": "hi"},
            headers=auth("two"),
        ) as r:
            assert r.status == 202
        got = await events_until(resp, 2)
        assert got[0].event == "user.prompt"
        assert json.loads(got[0].data)["data"]["text"] == "hi"
        resp.close()
        views = []
        for gw in (gateway, other):
            async with http.get(
                f"{gw.base}/v1/sessions/{sid}", headers=auth("two")
            ) as r:
                views.append(await r.json())
        assert views[0] == views[1]
        assert views[0]["status"] == "running"
    finally:
        assert other.stop() == 0


async def test_sigterm_ends_open_streams_and_exits_0(
    nats_server, gw_prefix, tmp_path, http
):
    gw = await start_gateway(nats_server.url, gw_prefix, tmp_path)
    sid = await create_session(http, gw, "term")
    resp = await open_stream(http, gw, sid, "term", query="?after=0")
    assert seqs(await events_until(resp, 1)) == [1]
    assert gw.proc is not None
    gw.proc.terminate()
    async with asyncio.timeout(15):
        while await read_event(resp) is not None:
            pass  # the stream ends cleanly (terminating chunk), not by a reset
    assert await asyncio.to_thread(gw.proc.wait, 15) == 0
