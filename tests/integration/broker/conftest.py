"""A broker replica in-process against the real sandbox host and nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
from nats.aio.client import Client

from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.names import BusNames
from tests.integration.broker.harness import Harness


@pytest.fixture
async def harness(nc: Client, prefix: str, sandboxhost: Any) -> AsyncIterator[Harness]:
    """A harness for one test (unique prefix; sandboxes killed afterwards)."""
    names = BusNames(prefix)
    await ensure_log_stream(nc.jetstream(), names, EventStoreSettings())
    h = Harness(nc, names, sandboxhost, AsyncExitStack())
    try:
        yield h
        first = await h.replica()
        for sid in await h.ours(first.life.provider):
            await first.life.provider.kill(sid)
    finally:
        sandboxhost.clear_faults()
        await h.stack.aclose()
