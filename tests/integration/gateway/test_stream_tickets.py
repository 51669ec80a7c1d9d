"""Stream tickets (``?ticket=`` for EventSource) across replicas, CORS and ``/app``."""

from __future__ import annotations

import time

import pytest

from services.gateway.tickets import TicketCodec

from .conftest import SECRET, auth, create_session, start_gateway, token
from .sse_client import read_event

ORIGIN = "https://app.example.test"


@pytest.fixture(scope="module")
async def replicas(nats_server, gw_prefix, tmp_path_factory):
    """Two gateway replicas on one bus, with CORS for ``ORIGIN``."""
    env = {"AGENTBUS_GATEWAY_CORS_ORIGINS": f"{ORIGIN}, https://other.test"}
    gws = []
    try:
        for _ in range(2):
            gws.append(
                await start_gateway(
                    nats_server.url, gw_prefix, tmp_path_factory.mktemp("gw"), **env
                )
            )
        yield gws
    finally:
        for gw in gws:
            assert gw.stop() == 0, gw.logs()


async def _ticket(http, gw, sid, device="tk"):
    url = f"{gw.base}/v1/sessions/{sid}/stream-ticket"
    async with http.post(url, headers=auth(device)) as r:
        assert r.status == 201, await r.text()
        body = await r.json()
    assert body["expires_at"].endswith("Z")
    return body["ticket"]


async def _stream_status(http, gw, sid, ticket, query="&follow=0"):
    url = f"{gw.base}/v1/sessions/{sid}/events?ticket={ticket}{query}"
    async with http.get(url) as r:
        return r.status, await r.text()


async def test_a_ticket_opens_its_session_stream_once_across_replicas(replicas, http):
    a, b = replicas
    sid = await create_session(http, a, "tk")
    ticket = await _ticket(http, a, sid)
    status, body = await _stream_status(http, b, sid, ticket)
    assert status == 200
    assert "event: session.created" in body
    assert "id: 1\n" in body
    assert (await _stream_status(http, b, sid, ticket))[0] == 401
    assert (await _stream_status(http, a, sid, ticket))[0] == 401


async def test_a_ticket_resumes_after_the_cursor_while_live(replicas, http):
    gw = replicas[0]
    sid = await create_session(http, gw, "tk")
    ticket = await _ticket(http, gw, sid)
    url = f"{gw.base}/v1/sessions/{sid}/events?ticket={ticket}&after=0"
    async with http.get(url) as resp:
        assert resp.status == 200
        event = await read_event(resp)
        while event is not None and event.comment:
            event = await read_event(resp)
        assert event is not None
        assert (event.id, event.event) == ("1", "session.created")


async def test_a_ticket_for_another_session_is_refused(replicas, http):
    gw = replicas[0]
    mine = await create_session(http, gw, "tk")
    other = await create_session(http, gw, "tk")
    ticket = await _ticket(http, gw, mine)
    status, body = await _stream_status(http, gw, other, ticket)
    assert status == 401
    assert '"code":"unauthorized"' in body


async def test_an_expired_ticket_is_refused(replicas, http):
    gw = replicas[0]
    sid = await create_session(http, gw, "tk")
    codec = TicketCodec(SECRET.encode())
    stale = codec.issue(sid, "tk", now=time.time() - 120).ticket
    fresh = codec.issue(sid, "tk").ticket  # the same signer: only the age differs
    assert (await _stream_status(http, gw, sid, stale))[0] == 401
    assert (await _stream_status(http, gw, sid, fresh))[0] == 200


@pytest.mark.parametrize(
    "forge",
    [
        lambda t, sid: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),  # bad mac
        lambda t, sid: token("tk"),  # a device token is not a ticket
        lambda t, sid: "t1.x",
        lambda t, sid: "",
    ],
)
async def test_forged_or_malformed_tickets_are_refused(replicas, http, forge):
    gw = replicas[0]
    sid = await create_session(http, gw, "tk")
    ticket = forge(await _ticket(http, gw, sid), sid)
    assert (await _stream_status(http, gw, sid, ticket))[0] == 401


async def test_a_ticket_is_not_a_bearer_token_nor_valid_on_other_routes(replicas, http):
    gw = replicas[0]
    sid = await create_session(http, gw, "tk")
    ticket = await _ticket(http, gw, sid)
    url = f"{gw.base}/v1/sessions/{sid}"
    async with http.get(url, headers={"Authorization": f"Bearer {ticket}"}) as r:
        assert r.status == 401
    async with http.get(f"{url}?ticket={ticket}") as r:
        assert r.status == 401
    assert (await _stream_status(http, gw, sid, ticket))[0] == 200  # still unused


async def test_cors_preflight_and_headers_for_configured_origins_only(replicas, http):
    gw = replicas[0]
    sid = await create_session(http, gw, "tk")
    url = f"{gw.base}/v1/sessions/{sid}/prompt"
    pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type"}  # fmt: skip
    async with http.options(url, headers=pre) as r:
        assert r.status == 204
        assert "POST" in r.headers["Access-Control-Allow-Methods"]
        assert "Authorization" in r.headers["Access-Control-Allow-Headers"]
        assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    async with http.options(url, headers={**pre, "Origin": "https://evil.test"}) as r:
        assert "Access-Control-Allow-Origin" not in r.headers
    ticket = await _ticket(http, gw, sid)
    events = f"{gw.base}/v1/sessions/{sid}/events?ticket={ticket}&follow=0"
    async with http.get(events, headers={"Origin": ORIGIN}) as r:
        assert r.status == 200
        assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    evil = {"Origin": "https://evil.test", **auth("tk")}
    async with http.get(url.removesuffix("/prompt"), headers=evil) as r:
        assert r.status == 200
        assert "Access-Control-Allow-Origin" not in r.headers


async def test_the_web_client_is_served_with_a_strict_policy(replicas, http):
    gw = replicas[0]
    async with http.get(f"{gw.base}/app") as r:
        assert r.status == 200
        assert "<script" in await r.text()
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]
    async with http.get(f"{gw.base}/app/static/app.js") as r:
        assert r.status == 200
        assert r.headers["X-Content-Type-Options"] == "nosniff"
    async with http.get(f"{gw.base}/app/static/../../app.py") as r:
        assert r.status in (403, 404)
