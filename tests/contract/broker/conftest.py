"""One provider conformance suite, run against every provider (local, e2b, ags)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from aiohttp import web

from services.broker.providers import Provider, make_provider
from services.broker.settings import BrokerSettings

from .fake_tencent import FakeAgs

SECRET_ID = "AKIDfake0123456789"
SECRET_KEY = "fake-secret-key-0123456789"


@pytest.fixture
async def fake_ags(sandboxhost: Any) -> AsyncIterator[tuple[FakeAgs, str]]:
    """A fake Tencent Cloud API on a free port, driving the sandbox host."""
    fake = FakeAgs(sandboxhost.url, sandboxhost.api_key, SECRET_ID, SECRET_KEY)
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield fake, f"127.0.0.1:{port}"
    await runner.cleanup()


def settings(kind: str, host: Any, endpoint: str = "", **over: Any) -> BrokerSettings:
    """Broker settings that point ``kind`` at the local sandbox host (or fake)."""
    raw: dict[str, Any] = {
        "broker_provider": kind,
        "sandboxhost_url": host.url,
        "sandboxhost_api_key": host.api_key,
        "e2b_api_url": host.url,
        "e2b_api_key": host.api_key,
        "e2b_sandbox_url": host.url,
        "ags_secret_id": SECRET_ID,
        "ags_secret_key": SECRET_KEY,
        "ags_endpoint": endpoint,
        "ags_scheme": "http",
        "ags_envd_url": host.url,
        "ags_tool_name": "base",
        "ags_poll_s": 0.02,
        "sandbox_timeout_s": 600,
    }
    raw.update(over)
    return msgspec.convert(raw, BrokerSettings)


@pytest.fixture(params=["local", "e2b", "ags"])
async def provider(
    request: pytest.FixtureRequest, sandboxhost: Any, fake_ags: tuple[FakeAgs, str]
) -> AsyncIterator[Provider]:
    """Each provider in turn (the fake Tencent API only matters for ``ags``)."""
    endpoint = fake_ags[1]
    prov = make_provider(settings(request.param, sandboxhost, endpoint))
    yield prov
    await prov.close()
