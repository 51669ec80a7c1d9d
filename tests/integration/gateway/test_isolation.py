"""Device isolation: another device's session is byte-identical to a missing one."""

from __future__ import annotations

import pytest

from .conftest import auth, create_session

# (method, path after /v1/sessions/{sid}, JSON body)
ENDPOINTS = [
    ("GET", "", None),
    ("DELETE", "", None),
    ("POST", "/prompt", {"text": "steal", "client_msg_id": "x"}),
    ("POST", "/prompt", {"bad": "body"}),
    ("POST", "/cancel", None),
    ("POST", "/permissions/r1", {"option": "allow_once"}),
    ("POST", "/permissions/r1", {"option": "nonsense"}),
    ("GET", "/events?follow=0", None),
    ("GET", "/events?after=1", None),
    ("POST", "/stream-ticket", None),
    ("GET", "/files/notes.txt", None),
    ("PUT", "/files/notes.txt", {"raw": "bytes"}),
]


async def _answer(http, method, url, device, body):
    async with http.request(method, url, headers=auth(device), json=body) as r:
        headers = {k: v for k, v in r.headers.items() if k.lower() != "date"}
        return r.status, await r.read(), headers


@pytest.mark.parametrize(("method", "suffix", "body"), ENDPOINTS)
async def test_foreign_session_answers_exactly_like_a_missing_one(
    gateway, http, method, suffix, body
):
    owned = await create_session(http, gateway, "owner-a", title="secret")
    base = f"{gateway.base}/v1/sessions"
    foreign = await _answer(http, method, f"{base}/{owned}{suffix}", "intruder-b", body)
    missing = await _answer(http, method, f"{base}/s_00000000000000000000{suffix}",
                            "intruder-b", body)  # fmt: skip
    assert foreign[0] == 404
    assert foreign == missing
    assert (
        foreign[1]
        == b'{"error":{"code":"session_not_found","message":"no such session"}}'
    )
    async with http.get(f"{base}/{owned}", headers=auth("owner-a")) as r:
        session = await r.json()
    assert (session["last_seq"], session["status"]) == (1, "idle")  # nothing appended


async def test_malformed_session_ids_are_plain_404(gateway, http):
    for sid in ("a.b", "*", ">", "x" * 65, "%2e%2e"):
        async with http.get(
            f"{gateway.base}/v1/sessions/{sid}", headers=auth("d")
        ) as r:
            assert r.status == 404
            assert (await r.json())["error"]["code"] in {
                "session_not_found",
                "not_found",
            }


async def test_list_shows_only_own_sessions(gateway, http):
    mine = await create_session(http, gateway, "iso-list-a")
    await create_session(http, gateway, "iso-list-b")
    async with http.get(f"{gateway.base}/v1/sessions", headers=auth("iso-list-a")) as r:
        listed = await r.json()
    assert [s["session_id"] for s in listed["sessions"]] == [mine]
