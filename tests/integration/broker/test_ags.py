"""The broker on the AGS provider (fake Tencent Cloud API over the sandbox host)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from services.broker.client import bind
from services.envd import EnvdClient
from tests.contract.broker.fake_tencent import FakeAgs
from tests.integration.broker.harness import Harness

SECRET_ID, SECRET_KEY = "AKIDbroker", "broker-secret"


@pytest.fixture
async def ags(harness: Harness) -> AsyncIterator[tuple[FakeAgs, dict[str, Any]]]:
    """A fake Tencent API and the broker settings that use it."""
    fake = FakeAgs(harness.host.url, harness.host.api_key, SECRET_ID, SECRET_KEY)
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    over = {
        "broker_provider": "ags",
        "ags_secret_id": SECRET_ID,
        "ags_secret_key": SECRET_KEY,
        "ags_endpoint": f"127.0.0.1:{port}",
        "ags_scheme": "http",
        "ags_envd_url": harness.host.url,
        "ags_tool_name": "base",
        "ags_poll_s": 0.02,
    }
    yield fake, over
    await runner.cleanup()


async def test_bind_pause_resume_on_ags_with_short_lived_tokens(
    harness: Harness, ags: tuple[FakeAgs, dict[str, Any]]
) -> None:
    fake, over = ags
    fake.token_ttl_s = 30  # under the refresh margin: every bind re-acquires
    broker = await harness.replica(**over)
    token = await harness.assign("wg", "sg")
    grant = await bind(harness.nc, harness.names, "wg", token)
    rec = (await broker.life.store.get("sg")).record
    assert grant.expires_at == rec.token_expires_at  # AGS expiry < the 900 s TTL
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.write_bytes("/workspace/g.txt", b"g")
    acquired = fake.calls.count("AcquireSandboxInstanceToken")
    again = await bind(harness.nc, harness.names, "wg", grant.next_token)
    assert fake.calls.count("AcquireSandboxInstanceToken") > acquired
    assert again.sandbox_id == grant.sandbox_id
    assert await broker.reaper.pause("sg", "idle")
    third = await bind(harness.nc, harness.names, "wg", again.next_token)
    assert "ResumeSandboxInstance" in fake.calls
    async with EnvdClient(third.envd_url, third.sandbox_id, third.access_token) as c:
        assert await c.read_bytes("/workspace/g.txt") == b"g"
