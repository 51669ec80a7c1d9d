"""Per-device caps: open sessions, live sandboxes, concurrent event streams → 429."""

from __future__ import annotations

import asyncio

import pytest

from schemas.events import SandboxState

from .conftest import auth, create_session, start_gateway


@pytest.fixture(scope="module")
async def capped(nats_server, gw_prefix, tmp_path_factory):
    gw = await start_gateway(
        nats_server.url,
        gw_prefix,
        tmp_path_factory.mktemp("caps"),
        AGENTBUS_GATEWAY_MAX_SESSIONS="3",
        AGENTBUS_GATEWAY_MAX_SANDBOXES="1",
        AGENTBUS_GATEWAY_MAX_STREAMS="2",
    )
    yield gw
    assert gw.stop() == 0, gw.logs()


async def post(http, url, device, **body):
    async with http.post(url, json=body, headers=auth(device)) as r:
        return r.status, await r.json()


async def test_open_sessions_are_capped_and_closing_one_frees_a_slot(capped, http):
    sids = [await create_session(http, capped, "cap-s") for _ in range(3)]
    status, body = await post(http, f"{capped.base}/v1/sessions", "cap-s")
    assert (status, body["error"]["code"]) == (429, "too_many_sessions")
    # Another device is not affected.
    await create_session(http, capped, "cap-s-other")
    async with http.delete(
        f"{capped.base}/v1/sessions/{sids[0]}", headers=auth("cap-s")
    ) as r:
        assert r.status == 202
    await create_session(http, capped, "cap-s")  # a closed session does not count


async def test_a_prompt_that_would_start_one_sandbox_too_many_is_refused(
    capped, http, bus
):
    first = await create_session(http, capped, "cap-b")
    second = await create_session(http, capped, "cap-b")
    await bus.append(first, SandboxState(state="running"), actor="broker:b")
    status, body = await post(
        http, f"{capped.base}/v1/sessions/{second}/prompt", "cap-b", text="hi"
    )
    assert (status, body["error"]["code"]) == (429, "too_many_sandboxes")
    # The session that holds the live sandbox still takes prompts.
    status, _ = await post(
        http, f"{capped.base}/v1/sessions/{first}/prompt", "cap-b", text="hi"
    )
    assert status == 202
    await bus.append(first, SandboxState(state="paused"), actor="broker:b")
    status, _ = await post(
        http, f"{capped.base}/v1/sessions/{second}/prompt", "cap-b", text="hi"
    )
    assert status == 202  # a paused sandbox holds no compute


async def test_concurrent_streams_are_capped_per_device(capped, http):
    sid = await create_session(http, capped, "cap-e")
    url = f"{capped.base}/v1/sessions/{sid}/events"
    first = await http.get(url, headers=auth("cap-e"))
    second = await http.get(url, headers=auth("cap-e"))
    try:
        assert (first.status, second.status) == (200, 200)
        async with http.get(url, headers=auth("cap-e")) as r:
            assert r.status == 429
            assert (await r.json())["error"]["code"] == "too_many_streams"
        other = await create_session(http, capped, "cap-e-other")
        async with http.get(
            f"{capped.base}/v1/sessions/{other}/events?follow=0",
            headers=auth("cap-e-other"),
        ) as r:
            assert r.status == 200  # other devices are not counted
    finally:
        first.close()
    try:
        # The server notices the hang-up asynchronously: wait for the freed slot.
        async with asyncio.timeout(10):
            while True:
                async with http.get(url + "?follow=0", headers=auth("cap-e")) as r:
                    if r.status == 200:
                        break
                    assert (await r.json())["error"]["code"] == "too_many_streams"
                await asyncio.sleep(0.05)
    finally:
        second.close()


async def test_the_stream_cap_holds_across_gateway_replicas(
    capped, http, nats_server, gw_prefix, tmp_path
):
    other = await start_gateway(
        nats_server.url, gw_prefix, tmp_path / "b", AGENTBUS_GATEWAY_MAX_STREAMS="2"
    )
    try:
        sid = await create_session(http, capped, "cap-x")
        path = f"/v1/sessions/{sid}/events"
        first = await http.get(capped.base + path, headers=auth("cap-x"))
        second = await http.get(other.base + path, headers=auth("cap-x"))
        try:
            assert (first.status, second.status) == (200, 200)
            for gw in (capped, other):  # one open on each: the device is at 2
                async with http.get(gw.base + path, headers=auth("cap-x")) as r:
                    assert r.status == 429
                    assert (await r.json())["error"]["code"] == "too_many_streams"
        finally:
            second.close()
        # The other replica's count drops when its stream ends.
        async with asyncio.timeout(10):
            while True:
                async with http.get(
                    capped.base + path + "?follow=0", headers=auth("cap-x")
                ) as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.05)
        first.close()
    finally:
        assert other.stop() == 0, other.logs()
