"""End to end: pool + a real ``agentbus broker`` process + the real sandbox host."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats.errors
import pytest
from nats.aio.client import Client

from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.broker import BindRequest
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess
from tests.integration.pool.harness import Harness

REPO = Path(__file__).resolve().parents[3]
AGENTBUS = Path(sys.executable).parent / "agentbus"


class BrokerProcess:
    """``agentbus broker`` for one test's prefix, on the shared sandbox host."""

    def __init__(self, nats_url: str, prefix: str, host: Any, log_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env.update(
            {
                "AGENTBUS_BUS_PREFIX": prefix,
                "AGENTBUS_BROKER_PROVIDER": "local",
                "AGENTBUS_SANDBOXHOST_URL": host.url,
                "AGENTBUS_SANDBOXHOST_API_KEY": host.api_key,
                "AGENTBUS_SANDBOX_TIMEOUT_S": "600",
            }
        )
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(AGENTBUS), "broker", "--nats", nats_url],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=REPO,
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(1)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


async def kill_sandboxes(host: Any, prefix: str) -> None:
    """Kill the sandboxes the broker made for this prefix."""
    headers = {"X-API-KEY": host.api_key}
    meta = urllib.parse.quote(f"agentbus_prefix={prefix}")
    async with aiohttp.ClientSession(headers=headers) as http:
        url = f"{host.url}/v2/sandboxes?state=running,paused&metadata={meta}"
        async with http.get(url) as resp:
            listed = await resp.json() if resp.status == 200 else []
        for item in listed:
            async with http.delete(f"{host.url}/sandboxes/{item['sandboxID']}"):
                pass


async def broker_ready(nc: Client, names: BusNames, timeout: float = 30.0) -> None:
    """Wait until a broker answers binds (a refusal is an answer)."""
    probe = msgspec.json.encode(BindRequest(worker_id="probe", token="probe"))
    async with asyncio.timeout(timeout):
        while True:
            try:
                await nc.request(names.broker_bind, probe, timeout=1)
            except (nats.errors.NoRespondersError, TimeoutError):
                await asyncio.sleep(0.05)
            else:
                return


@pytest.fixture
async def e2e(
    nc: Client,
    prefix: str,
    nats_server: NatsServerProcess,
    sandboxhost: Any,
    tmp_path: Path,
) -> AsyncIterator[Harness]:
    """A harness with a broker process; pools are started by the test."""
    names = BusNames(prefix)
    await ensure_log_stream(nc.jetstream(), names, EventStoreSettings())
    broker = BrokerProcess(
        nats_server.url, prefix, sandboxhost, tmp_path / "broker.log"
    )
    await broker_ready(nc, names)
    try:
        async with AsyncExitStack() as stack:
            yield Harness(nc, names, nats_server.url, stack, tmp_path)
    finally:
        broker.stop()
        await kill_sandboxes(sandboxhost, prefix)
