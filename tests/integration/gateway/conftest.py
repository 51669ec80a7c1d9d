"""Real gateway processes (``python -m services.gateway``) on the shared nats-server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
from nats.aio.client import Client

from eventstore.log import JetStreamLog
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess, free_port
from services.gateway.tokens import issue

SECRET = "gateway-test-secret"
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class GatewayProcess:
    """One real gateway process and how to talk to it."""

    nats_url: str
    prefix: str
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = dict(os.environ)
        env.update(
            {
                "AGENTBUS_DEVICE_SECRET": SECRET,
                "AGENTBUS_BUS_PREFIX": self.prefix,
                "AGENTBUS_GATEWAY_RATE_PER_S": "0",
                **self.env,
            }
        )
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / f"gateway-{self.port}.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.gateway", "--listen",
                 f"127.0.0.1:{self.port}", "--nats", self.nats_url,
                 "--data-dir", str(self.workdir)],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    async def ready(self, timeout: float = 20.0) -> None:
        async with aiohttp.ClientSession() as s, asyncio.timeout(timeout):
            while True:
                assert self.proc is not None
                assert self.proc.poll() is None, self.logs()
                try:
                    async with s.get(self.base + "/healthz") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def logs(self) -> str:
        return (self.workdir / f"gateway-{self.port}.log").read_text(errors="replace")


def token(device: str) -> str:
    return issue(SECRET.encode(), device)


def auth(device: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(device)}"}


async def start_gateway(
    nats_url: str, prefix: str, workdir: Path, **env: str
) -> GatewayProcess:
    gw = GatewayProcess(nats_url, prefix, workdir, env=dict(env))
    gw.start()
    try:
        await gw.ready()
    except BaseException:
        gw.stop()
        raise
    return gw


@pytest.fixture(scope="module")
def gw_prefix() -> str:
    return "g" + uuid.uuid4().hex[:10]


@pytest.fixture(scope="module")
async def gateway(
    nats_server: NatsServerProcess,
    gw_prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[GatewayProcess]:
    """A gateway process per test module, with a short ping and a small buffer."""
    gw = await start_gateway(
        nats_server.url,
        gw_prefix,
        tmp_path_factory.mktemp("gw"),
        AGENTBUS_GATEWAY_PING_S="0.3",
        AGENTBUS_GATEWAY_CLIENT_BUFFER="64",
        AGENTBUS_GATEWAY_CLIENT_BUFFER_BYTES="262144",
        AGENTBUS_GATEWAY_MAX_PROMPT_BYTES="4096",
    )
    yield gw
    assert gw.stop() == 0, gw.logs()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def bus(
    nats_server: NatsServerProcess, gw_prefix: str
) -> AsyncIterator[JetStreamLog]:
    """The session log as the workers see it (to append worker-side events)."""
    client: Client = await nats.connect(nats_server.url)
    yield JetStreamLog(client, BusNames(gw_prefix))
    await client.close()


async def create_session(
    http: aiohttp.ClientSession, gw: GatewayProcess, device: str, **body: Any
) -> str:
    async with http.post(
        f"{gw.base}/v1/sessions", json=body, headers=auth(device)
    ) as r:
        assert r.status == 201, await r.text()
        sid: str = (await r.json())["session_id"]
        return sid
