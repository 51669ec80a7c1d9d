"""The broker service as a whole: ``run(settings, stop)`` and ``main(argv)``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.broker.__main__ import main
from services.broker.client import bind
from services.broker.errors import BindRefusedError
from services.broker.service import run
from tests.integration.broker.harness import Harness, settings_for


async def test_run_serves_binds_and_stops_cleanly(
    harness: Harness, nats_server: Any
) -> None:
    settings = settings_for(
        harness.host, harness.names.prefix, nats_url=nats_server.url, broker_sweep_s=0.2
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run(settings, stop))
    token = await harness.assign("ws", "svc")
    for _ in range(100):
        try:
            grant = await bind(harness.nc, harness.names, "ws", token, timeout=10)
            break
        except BindRefusedError as exc:  # the subscription may not be up yet
            if exc.code != "broker_unavailable":
                raise
            await asyncio.sleep(0.05)
    assert grant.session_id == "svc"
    stop.set()
    await asyncio.wait_for(task, 15)


def test_a_bad_variable_exits_with_status_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTBUS_SANDBOX_IDLE_PAUSE_S", "soon")
    assert main([]) == 2
    assert "AGENTBUS_SANDBOX_IDLE_PAUSE_S" in capsys.readouterr().err
