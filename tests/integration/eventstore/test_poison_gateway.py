"""A poison message in a session's log, seen through a real gateway process.

GET of the session, its events (SSE replay), a prompt, and the device's whole
list must answer as usual, never 500 (issue 10 item 4).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from nats.aio.client import Client

from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess
from tests.integration.gateway.conftest import (
    GatewayProcess,
    auth,
    create_session,
    start_gateway,
)

DEVICE = "poisoned-device"


@pytest.fixture
async def gateway(
    nats_server: NatsServerProcess, prefix: str, tmp_path: Path
) -> AsyncIterator[GatewayProcess]:
    gw = await start_gateway(nats_server.url, prefix, tmp_path / "gw")
    yield gw
    assert gw.stop() == 0, gw.logs()


@pytest.mark.parametrize("where", ["next_seq", "junk_subject"])
async def test_a_poisoned_session_and_its_device_list_still_answer(
    gateway: GatewayProcess, nc: Client, prefix: str, where: str
) -> None:
    names = BusNames(prefix)
    async with aiohttp.ClientSession() as http:
        sid = await create_session(http, gateway, DEVICE, title="poisoned")
        other = await create_session(http, gateway, DEVICE, title="healthy")
        subject = (
            names.log_subject(sid, 2, "user.prompt")
            if where == "next_seq"
            else f"{prefix}.log.{sid}.junk"
        )
        await nc.jetstream().publish(subject, b"not an event")  # no headers
        base, hdrs = f"{gateway.base}/v1/sessions", auth(DEVICE)
        async with http.get(f"{base}/{sid}", headers=hdrs) as r:
            assert r.status == 200, await r.text()
            assert (await r.json())["title"] == "poisoned"
        async with http.get(f"{base}/{sid}/events?follow=0", headers=hdrs) as r:
            assert r.status == 200, await r.text()
            body = await r.text()
        assert "id: 1\n" in body
        assert "not an event" not in body
        async with http.post(
            f"{base}/{sid}/prompt", json={"text": "still there?"}, headers=hdrs
        ) as r:
            assert r.status == 202, await r.text()
            prompt_seq = (await r.json())["seq"]
        assert prompt_seq == (3 if where == "next_seq" else 2)
        async with http.get(base, headers=hdrs) as r:
            assert r.status == 200, await r.text()
            listed = {s["session_id"] for s in (await r.json())["sessions"]}
        assert listed == {sid, other}
