"""Short-lived sandbox tokens: envd refuses an expired grant's token, a re-bind rotates.

The broker's own envd uses (file API, archives) follow the rotation.
"""

from __future__ import annotations

import time

import aiohttp

from services.broker.client import bind
from services.envd import EnvdAuthError, EnvdClient
from tests.integration.broker.harness import Harness
from tests.integration.broker.test_files import api  # noqa: F401 - fixture
from tests.support.eventually import eventually

# Short enough to watch expire, long enough that the first write after a bind
# lands before expiry on a loaded 2-core machine (2 s was not, at load 20+).
TTL_S = 5.0
TTL = {"broker_token_ttl_s": TTL_S}


async def refused(url: str, sandbox_id: str, token: str | None) -> bool:
    """True once envd refuses ``token``."""
    async with EnvdClient(url, sandbox_id, token) as c:
        try:
            await c.read_bytes("/workspace/note.txt")
        except EnvdAuthError:
            return True
    return False


async def test_an_expired_grant_token_is_refused_and_a_rebind_rotates_it(
    harness: Harness,
) -> None:
    broker = await harness.replica(**TTL)
    token = await harness.assign("wt1", "st1")
    grant = await bind(harness.nc, harness.names, "wt1", token)
    assert grant.expires_at <= time.time() + TTL_S
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.write_bytes("/workspace/note.txt", b"kept")
    await eventually(
        lambda: refused(grant.envd_url, grant.sandbox_id, grant.access_token),
        timeout=TTL_S + 10.0,
    )
    again = await bind(harness.nc, harness.names, "wt1", grant.next_token)
    assert again.sandbox_id == grant.sandbox_id  # rotated in place, not resumed
    assert again.access_token != grant.access_token
    assert again.expires_at > grant.expires_at
    async with EnvdClient(again.envd_url, again.sandbox_id, again.access_token) as c:
        assert await c.read_bytes("/workspace/note.txt") == b"kept"
    rec = (await broker.life.store.get("st1")).record
    assert rec.access_token == again.access_token
    states = [s for s, _ in await harness.states("st1")]
    assert states == ["creating", "running"]


async def test_a_rebind_with_plenty_of_ttl_left_keeps_the_token(
    harness: Harness,
) -> None:
    await harness.replica(broker_token_ttl_s=600.0)
    token = await harness.assign("wt2", "st2")
    grant = await bind(harness.nc, harness.names, "wt2", token)
    again = await bind(harness.nc, harness.names, "wt2", grant.next_token)
    assert again.access_token == grant.access_token
    assert grant.expires_at <= time.time() + 600.0


async def test_file_api_and_archive_work_after_the_token_expired(
    harness: Harness,
    api: tuple[aiohttp.ClientSession, str],  # noqa: F811
) -> None:
    broker = await harness.replica(**TTL)
    token = await harness.assign("wt3", "dev-t3")
    grant = await bind(harness.nc, harness.names, "wt3", token)
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.write_bytes("/workspace/note.txt", b"from the worker")
    await eventually(
        lambda: refused(grant.envd_url, grant.sandbox_id, grant.access_token),
        timeout=TTL_S + 10.0,
    )
    assert await broker.reaper.save("dev-t3")  # the stale token is rotated first
    http, base = api
    async with http.get(f"{base}/v1/sessions/dev-t3/files/note.txt") as r:
        assert r.status == 200, await r.text()
        assert await r.read() == b"from the worker"
    rec = (await broker.life.store.get("dev-t3")).record
    assert rec.access_token != grant.access_token
    assert rec.token_expires_at > grant.expires_at
