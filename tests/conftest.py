"""Shared fixtures: one real nats-server per test session (per xdist worker)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from services.common.natsserver import NatsServerProcess

pytest_plugins = ["tests.plugins.sandboxhost", "tests.support.models"]


@pytest.fixture(scope="session")
def nats_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[NatsServerProcess]:
    """A real nats-server with JetStream, shared by every test of this process."""
    server = NatsServerProcess(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def nc(nats_server: NatsServerProcess) -> AsyncIterator[Client]:
    """A fresh client connection to the shared server."""
    client = await nats.connect(
        nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1
    )
    yield client
    await client.close()


@pytest.fixture
def prefix() -> str:
    """A unique name prefix so tests sharing one server never see each other."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A private data dir for one test."""
    d = tmp_path / "data"
    d.mkdir()
    return d
