"""Create and kill sandboxes on the real local sandbox host (E2B REST subset)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec


class SandboxRef(msgspec.Struct, frozen=True):
    """What a test needs to reach one sandbox's envd."""

    url: str
    sandbox_id: str
    access_token: str | None
    api_key: str


class _Created(msgspec.Struct):
    sandboxID: str
    envdAccessToken: str | None = None


async def create_sandbox(
    host: Any, session: aiohttp.ClientSession, template: str = "base"
) -> SandboxRef:
    """``POST /v2/sandboxes`` on the sandbox host."""
    url = host.url.rstrip("/")
    async with session.post(
        url + "/v2/sandboxes",
        json={"templateID": template, "timeout": 600},
        headers={"X-API-KEY": host.api_key},
    ) as resp:
        body = await resp.read()
        assert resp.status == 201, body
    created = msgspec.json.decode(body, type=_Created)
    return SandboxRef(url, created.sandboxID, created.envdAccessToken, host.api_key)


async def kill_sandbox(ref: SandboxRef, session: aiohttp.ClientSession) -> None:
    """``DELETE /sandboxes/{id}`` (a 404 is fine)."""
    async with session.delete(
        f"{ref.url}/sandboxes/{ref.sandbox_id}", headers={"X-API-KEY": ref.api_key}
    ) as resp:
        await resp.read()


@contextlib.asynccontextmanager
async def sandbox(host: Any, template: str = "base") -> AsyncIterator[SandboxRef]:
    """One fresh sandbox for the duration of the block."""
    async with aiohttp.ClientSession() as session:
        ref = await create_sandbox(host, session, template)
        try:
            yield ref
        finally:
            await kill_sandbox(ref, session)
