"""The App's file API: gateway HTTP → NATS → broker → sandbox or archive."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from services.broker.client import bind
from services.envd import EnvdClient
from services.gateway.errors import SessionNotFoundError
from services.gateway.files import FILE_DEPS, FileDeps, setup_file_routes
from services.gateway.tokens import issue
from tests.integration.broker.harness import Harness

SECRET = b"s" * 32


@pytest.fixture
async def api(harness: Harness) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """A gateway app with only the file routes, on a free port."""

    async def owned(sid: str, device: str) -> None:
        if not sid.startswith(device):
            raise SessionNotFoundError()

    from services.gateway.app import error_response
    from services.gateway.errors import GatewayError

    @web.middleware
    async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)  # type: ignore[no-any-return]
        except GatewayError as exc:
            return error_response(exc)

    app = web.Application(middlewares=[errors])
    app[FILE_DEPS] = FileDeps(harness.nc, harness.names, SECRET, owned)
    setup_file_routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    headers = {"Authorization": "Bearer " + issue(SECRET, "dev")}
    async with aiohttp.ClientSession(headers=headers) as http:
        yield http, f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_put_then_get_a_large_file_streams_in_chunks(
    harness: Harness, api: tuple[aiohttp.ClientSession, str]
) -> None:
    broker = await harness.replica()
    http, base = api
    blob = os.urandom(1_100_000)
    async with http.put(
        f"{base}/v1/sessions/dev1/files/dir/big.bin", data=io.BytesIO(blob)
    ) as r:
        assert r.status == 200, await r.text()
        assert await r.json() == {"path": "dir/big.bin", "size": len(blob)}
    async with http.get(f"{base}/v1/sessions/dev1/files/dir/big.bin") as r:
        assert r.status == 200
        assert await r.read() == blob
    assert await broker.reaper.pause("dev1", "idle")
    async with http.get(f"{base}/v1/sessions/dev1/files/dir/big.bin") as r:
        assert await r.read() == blob  # a paused sandbox is resumed to serve
    assert (await broker.life.store.get("dev1")).record.state == "running"
    async with http.get(f"{base}/v1/sessions/dev1/files/dir") as r:
        entries = (await r.json())["entries"]
        assert [(e["name"], e["type"], e["size"]) for e in entries] == [
            ("big.bin", "file", len(blob))
        ]


async def test_paths_that_leave_the_workspace_are_refused(
    harness: Harness, api: tuple[aiohttp.ClientSession, str]
) -> None:
    await harness.replica()
    http, base = api
    async with http.put(f"{base}/v1/sessions/dev2/files/ok.txt", data=b"x") as r:
        assert r.status == 200
    token = await harness.assign("wf", "dev2")
    grant = await bind(harness.nc, harness.names, "wf", token)
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        await c.run("ln -s /etc /workspace/etc && ln -s ok.txt /workspace/alias")
    for bad in ("etc/passwd", "..%2f..%2fetc%2fpasswd", "a/%2e%2e/%2e%2e/x"):
        url = URL(f"{base}/v1/sessions/dev2/files/{bad}", encoded=True)
        async with http.get(url) as r:
            assert r.status == 400, bad
            assert (await r.json())["error"]["code"] == "path_outside_workspace"
    async with http.get(f"{base}/v1/sessions/dev2/files/alias") as r:
        assert await r.read() == b"x"
    async with http.get(f"{base}/v1/sessions/other/files/ok.txt") as r:
        assert r.status == 404


async def test_an_archived_workspace_is_read_without_waking_a_sandbox(
    harness: Harness, api: tuple[aiohttp.ClientSession, str]
) -> None:
    broker = await harness.replica()
    http, base = api
    async with http.put(f"{base}/v1/sessions/dev3/files/notes/a.md", data=b"# a") as r:
        assert r.status == 200
    await broker.reaper.save("dev3")
    assert await broker.reaper.pause("dev3", "idle")
    assert await broker.reaper.archive("dev3", "test")
    async with http.get(f"{base}/v1/sessions/dev3/files/notes/a.md") as r:
        assert r.status == 200
        assert await r.read() == b"# a"
    async with http.get(f"{base}/v1/sessions/dev3/files/notes") as r:
        assert [e["name"] for e in (await r.json())["entries"]] == ["a.md"]
    async with http.get(f"{base}/v1/sessions/dev3/files/missing") as r:
        assert r.status == 404
    assert (await broker.life.store.get("dev3")).record.state == "archived"


async def test_a_put_over_the_size_limit_is_refused_with_413(
    harness: Harness, api: tuple[aiohttp.ClientSession, str]
) -> None:
    await harness.replica(broker_upload_max_mb=0.5)
    http, base = api
    blob = os.urandom(700_000)
    async with http.put(f"{base}/v1/sessions/dev3/files/big.bin", data=blob) as r:
        assert r.status == 413
        assert (await r.json())["error"]["code"] == "file_too_large"
    async with http.put(f"{base}/v1/sessions/dev3/files/ok.bin", data=b"x" * 1000) as r:
        assert r.status == 200


async def test_a_retried_upload_chunk_is_answered_again(harness: Harness) -> None:
    from schemas.files import (
        EOF_HEADER,
        OFFSET_HEADER,
        PATH_HEADER,
        SESSION_HEADER,
        UPLOAD_HEADER,
    )

    await harness.replica()
    subject = harness.names.broker_files + ".write"
    base = {SESSION_HEADER: "dev4", PATH_HEADER: "r.txt", UPLOAD_HEADER: "u1"}
    first = {**base, OFFSET_HEADER: "0"}
    last = {**base, OFFSET_HEADER: "3", EOF_HEADER: "1"}
    for headers in (first, first, last, last):  # every chunk sent twice
        reply = await harness.nc.request(subject, b"abc", 30, headers=headers)
        assert not (reply.headers or {}).get("Agentbus-Error"), reply.data
    token = await harness.assign("wf4", "dev4")
    grant = await bind(harness.nc, harness.names, "wf4", token)
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        assert await c.read_bytes("/workspace/r.txt") == b"abcabc"


async def test_no_broker_is_a_bounded_503_with_retry_after(harness: Harness) -> None:
    from services.gateway.errors import GatewayError
    from services.gateway.files import _ask

    async def owned(sid: str, device: str) -> None:
        return None

    deps = FileDeps(harness.nc, harness.names, SECRET, owned, retry_s=0.3)
    with pytest.raises(GatewayError) as info:
        await _ask(deps, harness.names.broker_files + ".stat", b"{}")
    assert (info.value.status, info.value.code) == (503, "unavailable")
    assert info.value.headers["Retry-After"]
