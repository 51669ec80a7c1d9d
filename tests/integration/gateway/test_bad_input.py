"""Bad input on every endpoint: 400 malformed, 422 with the field, 413 too large."""

from __future__ import annotations

import io

import pytest

from .conftest import auth, create_session

BAD, INV, BIG = "malformed_json", "invalid_request", "too_large"
CASES = [
    # (method, path suffix ("" = /v1/sessions), raw body, status, code, field)
    ("POST", None, b"{nope", 400, BAD, None),
    ("POST", None, b'{"title": 5}', 422, INV, "$.title"),
    ("POST", None, b'{"metadata": {"k": 1}}', 422, INV, "$.metadata[...]"),
    ("POST", None, b'{"extra": 1}', 422, INV, "$.extra"),
    ("POST", None, b'{"title": "' + b"t" * 201 + b'"}', 422, INV, "$.title"),
    ("POST", None, b"[]", 422, INV, "$"),
    ("POST", "/prompt", b"\xff\xfe", 400, BAD, None),
    ("POST", "/prompt", b"{}", 422, INV, "$.text"),
    ("POST", "/prompt", b"", 422, INV, "$.text"),
    ("POST", "/prompt", b'{"text": ""}', 422, INV, "$.text"),
    ("POST", "/prompt", b'{"text": "a", "client_msg_id": 5}', 422, INV,
     "$.client_msg_id"),
    ("POST", "/prompt", b'{"text": "' + b"x" * 4097 + b'"}', 413, BIG, "$.text"),
    ("POST", "/prompt", b'{"text": "' + b"x" * (2 << 20) + b'"}', 413, BIG, None),
    ("POST", "/permissions/r1", b"{", 400, BAD, None),
    ("POST", "/permissions/r1", b'{"option": "maybe"}', 422, INV, "$.option"),
    ("POST", "/permissions/r1", b"{}", 422, INV, "$.option"),
    ("GET", "/events?after=abc", None, 422, INV, "$.after"),
    ("GET", "/events?after=-1", None, 422, INV, "$.after"),
    ("GET", "/events?follow=2", None, 422, INV, "$.follow"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "suffix", "raw", "status", "code", "field"), CASES)
async def test_bad_input_gets_a_clear_error(
    gateway, http, method, suffix, raw, status, code, field
):
    sid = await create_session(http, gateway, "bad-input")
    url = f"{gateway.base}/v1/sessions" + ("" if suffix is None else f"/{sid}{suffix}")
    headers = {**auth("bad-input"), "Content-Type": "application/json"}
    data = io.BytesIO(raw) if raw is not None and len(raw) > 1 << 20 else raw
    async with http.request(method, url, data=data, headers=headers) as r:
        body = await r.json()
        assert r.status == status, body
    assert body["error"]["code"] == code
    assert body["error"].get("field") == field
    async with http.get(
        f"{gateway.base}/v1/sessions/{sid}", headers=auth("bad-input")
    ) as r:
        assert (await r.json())["last_seq"] == 1  # nothing was appended


async def test_bad_last_event_id_header_is_422(gateway, http):
    sid = await create_session(http, gateway, "bad-input")
    headers = {**auth("bad-input"), "Last-Event-ID": "x1"}
    async with http.get(
        f"{gateway.base}/v1/sessions/{sid}/events", headers=headers
    ) as r:
        assert r.status == 422
        assert (await r.json())["error"]["field"] == "Last-Event-ID"


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/nope", 404, "not_found"),
        ("GET", "/v1/sessions/s_1/nope", 404, "not_found"),
        ("PUT", "/v1/sessions", 405, "method_not_allowed"),
        ("PATCH", "/v1/sessions/s_1/prompt", 405, "method_not_allowed"),
    ],
)
async def test_unknown_routes_use_the_error_shape(
    gateway, http, method, path, status, code
):
    async with http.request(method, gateway.base + path, headers=auth("d")) as r:
        assert r.status == status
        assert r.headers["Content-Type"].startswith("application/json")
        assert (await r.json())["error"]["code"] == code
