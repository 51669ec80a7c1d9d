"""Sandbox usage events from a real broker and sandbox host, on an injected clock."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack

import aiohttp

from schemas.events import SandboxUsage
from services.broker.client import bind
from services.broker.metering import serve_metrics
from services.common.natsserver import free_port
from services.envd import EnvdClient
from tests.integration.broker.harness import Harness, settings_for


async def _usage(harness: Harness, session_id: str) -> list[SandboxUsage]:
    out = []
    for stored in await harness.log.read(session_id, 0):
        ev = stored.event()
        if isinstance(ev.data, SandboxUsage):
            out.append(ev.data)
    return out


async def test_each_billed_state_is_metered_when_the_sandbox_leaves_it(
    harness: Harness,
) -> None:
    now = [time.time()]
    start = now[0]
    broker = await harness.replica(
        sandbox_idle_pause_s=600, sandbox_archive_after_s=3600, clock=lambda: now[0]
    )
    token = await harness.assign("wu1", "metered")
    grant = await bind(harness.nc, harness.names, "wu1", token)
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.write_bytes("/workspace/big.bin", b"z" * 5000)
    for offset in (600, 3600):
        now[0] += offset
        await broker.reaper.sweep_once()
    now[0] += 86400  # a day archived, then the user comes back
    token = await harness.assign("wu2", "metered")
    await bind(harness.nc, harness.names, "wu2", token)

    usage = await _usage(harness, "metered")
    moves = [(u.state, u.next_state) for u in usage]
    assert moves == [
        (None, "running"),
        ("running", "paused"),
        ("paused", "archived"),
        ("archived", "running"),
    ]
    assert [u.seconds for u in usage[1:]] == [600.0, 3600.0, 86400.0]
    assert usage[2].archive_bytes >= 5000  # the archive holds big.bin
    assert usage[3].archive_bytes == usage[2].archive_bytes
    assert [u.at - start for u in usage] == [0.0, 600.0, 4200.0, 90600.0]

    # The same seconds, counted for Prometheus on the broker's /metrics.
    settings = settings_for(harness.host, "m", broker_metrics_port=free_port())
    async with AsyncExitStack() as stack, aiohttp.ClientSession() as http:
        url = await serve_metrics(settings, stack)
        assert url is not None
        async with http.get(url) as r:
            text = await r.text()
    counted = {
        line.split('"')[1]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("agentbus_sandbox_seconds_total{")
    }
    assert counted["running"] >= 600
    assert counted["archived"] >= 86400
