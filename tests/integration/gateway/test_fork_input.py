"""POST /v1/sessions/{sid}/fork: bad input answered with the field; no broker 503."""

from __future__ import annotations

import pytest

from .conftest import auth, create_session

CASES = [
    (b"{nope", 400, "malformed_json", None),
    (b"{}", 422, "invalid_request", "$.at_seq"),
    (b'{"at_seq": 0}', 422, "invalid_request", "$.at_seq"),
    (b'{"at_seq": "1"}', 422, "invalid_request", "$.at_seq"),
    (b'{"at_seq": 1, "title": 5}', 422, "invalid_request", "$.title"),
    (b'{"at_seq": 1, "extra": 1}', 422, "invalid_request", "$.extra"),
    (b'{"at_seq": 99}', 422, "invalid_request", "$.at_seq"),  # past the log's end
]


@pytest.mark.parametrize(("raw", "status", "code", "field"), CASES)
async def test_bad_fork_bodies(gateway, http, raw, status, code, field):
    sid = await create_session(http, gateway, "forker")
    url = f"{gateway.base}/v1/sessions/{sid}/fork"
    headers = {**auth("forker"), "Content-Type": "application/json"}
    async with http.post(url, data=raw, headers=headers) as r:
        assert r.status == status, await r.text()
        error = (await r.json())["error"]
        assert error["code"] == code
        assert error.get("field") == field


async def test_another_devices_session_is_404_and_no_broker_is_503(gateway, http):
    sid = await create_session(http, gateway, "owner")
    url = f"{gateway.base}/v1/sessions/{sid}/fork"
    async with http.post(url, json={"at_seq": 1}, headers=auth("other")) as r:
        assert r.status == 404
    async with http.post(url, json={"at_seq": 1}, headers=auth("owner")) as r:
        assert r.status == 503
        assert (await r.json())["error"]["code"] == "broker_unavailable"
        assert r.headers["Retry-After"] == "10"


async def test_the_route_is_in_the_openapi_document(gateway, http):
    async with http.get(f"{gateway.base}/v1/openapi.json") as r:
        doc = await r.json()
    op = doc["paths"]["/v1/sessions/{sid}/fork"]["post"]
    assert "201" in op["responses"]
    body = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body.endswith("/ForkSession")
