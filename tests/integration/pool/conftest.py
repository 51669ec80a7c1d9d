"""The pool harness fixture (helpers live in ``harness.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from nats.aio.client import Client

from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess
from tests.integration.pool.harness import Harness


@pytest.fixture
async def harness(
    nc: Client, prefix: str, nats_server: NatsServerProcess, tmp_path: Path
) -> AsyncIterator[Harness]:
    """One harness per test."""
    names = BusNames(prefix)
    await ensure_log_stream(nc.jetstream(), names, EventStoreSettings())
    async with AsyncExitStack() as stack:
        yield Harness(nc, names, nats_server.url, stack, tmp_path)
