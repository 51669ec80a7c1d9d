"""One provider conformance suite, run against every provider (local, e2b, ags)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from services.broker.providers import Provider, make_provider
from tests.contract.broker.fake_tencent import FakeAgs
from tests.contract.broker.support import SECRET_ID, SECRET_KEY, settings


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


@pytest.fixture(params=["local", "e2b", "ags"])
async def provider(
    request: pytest.FixtureRequest, sandboxhost: Any, fake_ags: tuple[FakeAgs, str]
) -> AsyncIterator[Provider]:
    """Each provider in turn (the fake Tencent API only matters for ``ags``)."""
    endpoint = fake_ags[1]
    prov = make_provider(settings(request.param, sandboxhost, endpoint))
    yield prov
    await prov.close()
