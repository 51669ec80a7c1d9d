"""Fixtures of the projector service tests (real nats-server throughout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore.settings import EventStoreSettings
from services.common.natsserver import NatsServerProcess
from tests.support.eventstore import settings_for


@pytest.fixture
def settings(
    nats_server: NatsServerProcess, prefix: str, tmp_path: Path
) -> EventStoreSettings:
    """This test's settings: its own stream (by prefix) and SQLite file."""
    return settings_for(nats_server.url, prefix, tmp_path / "projection.db")
