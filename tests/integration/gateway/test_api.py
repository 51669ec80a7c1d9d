"""The App API over HTTP against a real gateway process and nats-server."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from eventstore.log import JetStreamLog
from schemas.events import PermissionRequested, TurnEnded, TurnStarted

from .conftest import auth, create_session, start_gateway, token


async def call(
    http: aiohttp.ClientSession,
    method: str,
    url: str,
    device: str = "devA",
    **kw: Any,
) -> tuple[int, Any]:
    async with http.request(method, url, headers=auth(device), **kw) as r:
        return r.status, await r.json()


async def test_session_is_created_read_and_listed_newest_first(gateway, http):
    first = await create_session(
        http, gateway, "lister", title="one", metadata={"k": "v"}
    )
    second = await create_session(http, gateway, "lister", title="two")
    status, body = await call(
        http, "GET", f"{gateway.base}/v1/sessions/{first}", "lister"
    )
    assert status == 200
    assert body["title"] == "one"
    assert body["metadata"] == {"k": "v"}
    assert (body["status"], body["last_seq"], body["queued"], body["sandbox"]) == (
        "idle",
        1,
        0,
        "none",
    )
    status, listed = await call(http, "GET", f"{gateway.base}/v1/sessions", "lister")
    assert status == 200
    assert [s["session_id"] for s in listed["sessions"]] == [second, first]
    _, other = await call(http, "GET", f"{gateway.base}/v1/sessions", "someone-else")
    assert other == {"sessions": []}


async def test_same_client_msg_id_returns_first_answer_and_appends_once(gateway, http):
    sid = await create_session(http, gateway, "devA")
    url = f"{gateway.base}/v1/sessions/{sid}/prompt"
    body = {"text": "hello", "client_msg_id": "m-1"}
    answers = await asyncio.gather(
        *(call(http, "POST", url, json=body) for _ in range(8))
    )
    assert {status for status, _ in answers} == {202}
    assert len({(a["seq"], a["turn_id"]) for _, a in answers}) == 1
    status, again = await call(
        http, "POST", url, json={"text": "other", "client_msg_id": "m-1"}
    )
    assert (status, again) == (202, answers[0][1])
    _, session = await call(http, "GET", f"{gateway.base}/v1/sessions/{sid}")
    assert session["last_seq"] == 2
    assert session["status"] == "running"


async def test_prompts_without_client_msg_id_queue_in_order(gateway, http):
    sid = await create_session(http, gateway, "devA")
    url = f"{gateway.base}/v1/sessions/{sid}/prompt"
    seqs = [
        (await call(http, "POST", url, json={"text": f"p{i}"}))[1]["seq"]
        for i in range(3)
    ]
    assert seqs == [2, 3, 4]
    _, session = await call(http, "GET", f"{gateway.base}/v1/sessions/{sid}")
    assert (session["status"], session["queued"]) == ("running", 3)


async def test_cancel_is_409_without_a_turn_and_202_with_one(gateway, http):
    sid = await create_session(http, gateway, "devA")
    url = f"{gateway.base}/v1/sessions/{sid}/cancel"
    status, body = await call(http, "POST", url)
    assert (status, body["error"]["code"]) == (409, "no_turn_running")
    await call(
        http, "POST", f"{gateway.base}/v1/sessions/{sid}/prompt", json={"text": "x"}
    )
    status, body = await call(http, "POST", url)
    assert (status, body) == (202, {"seq": 3})


async def test_status_follows_the_log_written_by_workers(
    gateway, http, bus: JetStreamLog
):
    sid = await create_session(http, gateway, "devA")
    _, prompt = await call(
        http, "POST", f"{gateway.base}/v1/sessions/{sid}/prompt", json={"text": "go"}
    )
    turn = prompt["turn_id"]
    await bus.append(sid, TurnStarted(turn_id=turn, prompt_seq=2), actor="worker:w1")
    await bus.append(
        sid,
        PermissionRequested(request_id="r1", turn_id=turn, call_id="c1", tool="bash"),
        actor="worker:w1",
    )
    _, session = await call(http, "GET", f"{gateway.base}/v1/sessions/{sid}")
    assert (session["status"], session["last_seq"], session["queued"]) == (
        "awaiting_permission",
        4,
        0,
    )
    await bus.append(
        sid, TurnEnded(turn_id=turn, stop_reason="end_turn"), actor="worker:w1"
    )
    _, session = await call(http, "GET", f"{gateway.base}/v1/sessions/{sid}")
    assert (session["status"], session["last_seq"]) == ("idle", 5)


async def test_permission_answer_is_200_once_then_409_and_404_when_unknown(
    gateway, http, bus: JetStreamLog
):
    sid = await create_session(http, gateway, "devA")
    _, prompt = await call(
        http, "POST", f"{gateway.base}/v1/sessions/{sid}/prompt", json={"text": "go"}
    )
    await bus.append(
        sid,
        PermissionRequested(
            request_id="r1", turn_id=prompt["turn_id"], call_id="c", tool="t"
        ),
        actor="worker:w1",
    )
    url = f"{gateway.base}/v1/sessions/{sid}/permissions/r1"
    answers = await asyncio.gather(
        *(call(http, "POST", url, json={"option": "allow_once"}) for _ in range(4))
    )
    assert sorted(status for status, _ in answers) == [200, 409, 409, 409], answers
    status, body = await call(
        http,
        "POST",
        f"{gateway.base}/v1/sessions/{sid}/permissions/nope",
        json={"option": "allow_once"},
    )
    assert (status, body["error"]["code"]) == (404, "permission_not_found")
    events = await bus.read(sid)
    assert [e.type for e in events].count("permission.resolved") == 1


async def test_delete_appends_closed_once_and_blocks_prompts(gateway, http):
    sid = await create_session(http, gateway, "devA")
    url = f"{gateway.base}/v1/sessions/{sid}"
    first = await call(http, "DELETE", url)
    second = await call(http, "DELETE", url)
    assert first[0] == second[0] == 202
    assert first[1]["status"] == "closed"
    assert second[1]["last_seq"] == 2
    status, body = await call(http, "POST", f"{url}/prompt", json={"text": "late"})
    assert (status, body["error"]["code"]) == (409, "session_closed")


@pytest.mark.parametrize(
    "header",
    [None, "Bearer", "Basic abc", "Bearer v1.devA.1.sig", "Bearer " + "x" * 40],
    ids=["missing", "empty", "basic", "forged", "garbage"],
)
async def test_bad_or_missing_token_is_401_with_one_body(gateway, http, header):
    headers = {"Authorization": header} if header else {}
    async with http.get(f"{gateway.base}/v1/sessions", headers=headers) as r:
        assert r.status == 401
        assert await r.read() == (
            b'{"error":{"code":"unauthorized",'
            b'"message":"a valid device token is required"}}'
        )
        assert r.headers["WWW-Authenticate"].startswith("Bearer")


async def test_expired_token_is_401(gateway, http):
    from services.gateway.tokens import issue

    from .conftest import SECRET

    expired = issue(SECRET.encode(), "devA", ttl_s=-10)
    async with http.get(
        f"{gateway.base}/v1/sessions", headers={"Authorization": f"Bearer {expired}"}
    ) as r:
        assert r.status == 401


async def test_health_metrics_and_openapi_are_public(gateway, http):
    async with http.get(f"{gateway.base}/healthz") as r:
        assert (r.status, await r.json()) == (200, {"status": "ok"})
    async with http.get(f"{gateway.base}/metrics") as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        assert "agentbus_gateway_requests_total" in await r.text()
    async with http.get(f"{gateway.base}/v1/openapi.json") as r:
        doc = await r.json()
    assert doc["openapi"] == "3.1.0"
    assert doc["components"]["schemas"]["Session"]["required"]
    assert "422" in doc["paths"]["/v1/sessions/{sid}/prompt"]["post"]["responses"]


async def test_rate_limit_answers_429_with_retry_after(
    nats_server, gw_prefix, tmp_path, http
):
    gw = await start_gateway(
        nats_server.url,
        gw_prefix,
        tmp_path,
        AGENTBUS_GATEWAY_RATE_PER_S="0.5",
        AGENTBUS_GATEWAY_RATE_BURST="3",
    )
    try:
        statuses = []
        for _ in range(5):
            async with http.get(f"{gw.base}/v1/sessions", headers=auth("rl")) as r:
                statuses.append(r.status)
                retry_after = r.headers.get("Retry-After")
                body = await r.json()
        assert statuses == [200, 200, 200, 429, 429]
        assert body["error"]["code"] == "rate_limited"
        assert int(retry_after or 0) >= 1
        async with http.get(f"{gw.base}/v1/sessions", headers=auth("other")) as r:
            assert r.status == 200  # per device
    finally:
        assert gw.stop() == 0


async def test_healthz_is_503_when_nats_is_down(tmp_path, http):
    from services.common.natsserver import NatsServerProcess

    server = NatsServerProcess(tmp_path / "nats")
    server.start()
    gw = await start_gateway(
        server.url, "h" + tmp_path.name[-8:].replace("-", ""), tmp_path
    )
    try:
        server.kill()
        async with asyncio.timeout(20):
            while True:
                async with http.get(f"{gw.base}/healthz") as r:
                    if r.status == 503:
                        assert r.headers["Retry-After"] == "1"
                        assert (await r.json())["error"]["code"] == "unavailable"
                        break
                await asyncio.sleep(0.05)
        server.start()
        await gw.ready()
    finally:
        gw.stop()
        server.stop()


def test_token_helper_matches_gateway_secret():
    assert token("devA").startswith("v1.devA.")


async def test_file_api_is_mounted_and_answers_503_without_a_broker(gateway, http):
    sid = await create_session(http, gateway, "files")
    url = f"{gateway.base}/v1/sessions/{sid}/files/a.txt"
    async with http.get(url, headers=auth("files")) as r:
        assert r.status == 503
        assert (await r.json())["error"]["code"] == "unavailable"
