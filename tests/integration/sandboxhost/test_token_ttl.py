"""Envd token lifetimes and rotation (agentbus headers); plain E2B as before."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from e2b import AsyncSandbox

from services.envd import EnvdAuthError, EnvdClient
from tests.plugins.sandboxhost import SandboxHostProcess
from tests.support.eventually import eventually
from tests.support.sandboxhost import opts


class Control:
    """Raw control-plane calls with optional agentbus token headers."""

    def __init__(self, host: SandboxHostProcess, http: aiohttp.ClientSession) -> None:
        self.host = host
        self.http = http
        self.ids: list[str] = []

    async def call(
        self, path: str, body: dict[str, Any], **headers: str
    ) -> tuple[int, dict[str, Any]]:
        """POST ``path`` → (status, JSON answer)."""
        hdrs = {"X-API-KEY": self.host.api_key, **headers}
        async with self.http.post(self.host.url + path, json=body, headers=hdrs) as r:
            return r.status, await r.json()

    async def create(self, **headers: str) -> dict[str, Any]:
        """A new sandbox (killed after the test)."""
        status, data = await self.call(
            "/v2/sandboxes", {"templateID": "base", "timeout": 120}, **headers
        )
        assert status == 201, data
        self.ids.append(data["sandboxID"])
        return data

    def envd(self, sandbox_id: str, token: str) -> EnvdClient:
        """An envd client of this host with ``token``."""
        return EnvdClient(self.host.url, sandbox_id, token, session=self.http)


@pytest.fixture
async def ctl(sandboxhost: SandboxHostProcess) -> AsyncIterator[Control]:
    """Control-plane helper; kills its sandboxes afterwards."""
    async with aiohttp.ClientSession() as http:
        c = Control(sandboxhost, http)
        yield c
        for sid in c.ids:
            hdrs = {"X-API-KEY": sandboxhost.api_key}
            async with http.delete(f"{sandboxhost.url}/sandboxes/{sid}", headers=hdrs):
                pass


async def refused(client: EnvdClient) -> bool:
    """True once envd refuses the client's token."""
    try:
        await client.read_bytes("/etc/passwd")
    except EnvdAuthError:
        return True
    return False


async def test_a_token_with_a_ttl_is_refused_once_it_expires(ctl: Control) -> None:
    data = await ctl.create(**{"X-Agentbus-Token-Ttl": "1"})
    assert data["envdAccessTokenExpiresAt"] <= time.time() + 1
    client = ctl.envd(data["sandboxID"], data["envdAccessToken"])
    assert not await refused(client)
    await eventually(lambda: refused(client), timeout=10)


async def test_rotation_answers_a_new_token_and_the_old_one_dies_after_its_grace(
    ctl: Control,
) -> None:
    data = await ctl.create(**{"X-Agentbus-Token-Ttl": "60"})
    sid, old = data["sandboxID"], data["envdAccessToken"]
    rotate = {"X-Agentbus-Token-Ttl": "60", "X-Agentbus-Rotate-Token": "1"}
    status, fresh = await ctl.call(f"/v2/sandboxes/{sid}/connect", {}, **rotate)
    assert status == 200
    assert fresh["envdAccessToken"] != old
    assert not await refused(ctl.envd(sid, fresh["envdAccessToken"]))
    # Default grace: the broker's in-flight requests with the old token pass.
    assert not await refused(ctl.envd(sid, old))
    status, third = await ctl.call(
        f"/v2/sandboxes/{sid}/connect", {}, **rotate, **{"X-Agentbus-Token-Grace": "0"}
    )
    assert status == 200
    assert await refused(ctl.envd(sid, fresh["envdAccessToken"]))
    assert await refused(ctl.envd(sid, old))  # only one previous token is kept
    assert not await refused(ctl.envd(sid, third["envdAccessToken"]))


async def test_without_the_headers_tokens_never_expire_and_connect_keeps_them(
    ctl: Control,
) -> None:
    data = await ctl.create()
    assert "envdAccessTokenExpiresAt" not in data
    sid = data["sandboxID"]
    status, again = await ctl.call(f"/v2/sandboxes/{sid}/connect", {"timeout": 60})
    assert status == 200
    assert again["envdAccessToken"] == data["envdAccessToken"]
    assert "envdAccessTokenExpiresAt" not in again


async def test_a_bad_ttl_header_is_a_400(ctl: Control) -> None:
    status, data = await ctl.call(
        "/v2/sandboxes", {"templateID": "base"}, **{"X-Agentbus-Token-Ttl": "soon"}
    )
    assert status == 400
    assert "X-Agentbus-Token-Ttl" in data["message"]


async def test_a_plain_sdk_sandbox_keeps_working_while_another_token_expires(
    ctl: Control, sandboxhost: SandboxHostProcess
) -> None:
    sbx = await AsyncSandbox.create(timeout=60, **opts(sandboxhost))
    try:
        rotated = await ctl.create(**{"X-Agentbus-Token-Ttl": "1"})
        assert await eventually(
            lambda: refused(ctl.envd(rotated["sandboxID"], rotated["envdAccessToken"]))
        )
        again = await AsyncSandbox.connect(sbx.sandbox_id, **opts(sandboxhost))
        result = await again.commands.run("echo ok")
        assert result.stdout.strip() == "ok"
    finally:
        await sbx.kill()
