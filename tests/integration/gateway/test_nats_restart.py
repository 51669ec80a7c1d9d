"""A nats-server killed and restarted under an open SSE stream: no gap, no duplicate."""

from __future__ import annotations

import asyncio

import nats

from eventstore.log import JetStreamLog
from schemas.events import ToolUpdate
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess

from .conftest import auth, create_session, start_gateway
from .sse_client import read_event


async def test_stream_survives_nats_restart_without_gap_or_duplicate(tmp_path, http):
    server = NatsServerProcess(tmp_path / "nats")  # our own: we kill it
    server.start()
    prefix = "rs" + tmp_path.name[-6:].replace("-", "").replace("_", "")
    gw = await start_gateway(server.url, prefix, tmp_path / "gw")
    client = await nats.connect(
        server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1
    )
    bus = JetStreamLog(client, BusNames(prefix))
    try:
        sid = await create_session(http, gw, "rs")
        resp = await http.get(
            f"{gw.base}/v1/sessions/{sid}/events?after=1", headers=auth("rs")
        )
        got: list[int] = []

        async def read_until(seq: int) -> None:
            async with asyncio.timeout(60):
                while not got or got[-1] < seq:
                    ev = await read_event(resp)
                    assert ev is not None, f"stream ended after {got}"
                    if not ev.comment:
                        assert ev.event != "resync"
                        got.append(int(ev.id))

        for i in range(10):
            await bus.append(sid, ToolUpdate(call_id=f"a{i}"), actor="worker:w")
        await read_until(11)
        server.kill()
        server.start()
        for i in range(10):
            await bus.append(sid, ToolUpdate(call_id=f"b{i}"), actor="worker:w")
        async with http.post(
            f"{gw.base}/v1/sessions/{sid}/prompt",
            json={"text": "after"},
            headers=auth("rs"),
        ) as r:
            assert r.status == 202, await r.text()
        await read_until(22)
        resp.close()
        assert got == list(range(2, 23))
    finally:
        await client.close()
        assert gw.stop() == 0, gw.logs()
        server.stop()
