"""Hostile HTTP: undecodable headers, slowloris sockets, two gateways on one port."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from .conftest import GatewayProcess, auth, create_session, start_gateway, token

HEADER_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
async def strict_gw(nats_server, gw_prefix, tmp_path_factory):
    """A gateway that drops connections without a request head after 1 s."""
    gw = await start_gateway(
        nats_server.url,
        gw_prefix,
        tmp_path_factory.mktemp("strict"),
        AGENTBUS_GATEWAY_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
        AGENTBUS_GATEWAY_PING_S="0.2",
    )
    yield gw
    assert gw.stop() == 0, gw.logs()


async def raw_request(gw: GatewayProcess, head: bytes) -> tuple[int, dict]:
    """Send a hand-written request head; the status and JSON body of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    try:
        writer.write(head)
        await writer.drain()
        async with asyncio.timeout(10):
            raw = await reader.read()  # Connection: close → read to EOF
    finally:
        writer.close()
    status_line, _, rest = raw.partition(b"\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(body)


def head(path: str, *lines: bytes) -> bytes:
    start = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
    return start + b"".join(line + b"\r\n" for line in lines) + b"\r\n"


@pytest.mark.parametrize(
    "value",
    [
        b"Bearer \xff\xfe",
        b"Bearer \xc3\xa9t\xc3\xa9",
        "Bearer v1.d\u00e9v.9999999999.AAAA".encode(),
        b"\xff",
    ],
)
async def test_undecodable_authorization_is_401(strict_gw, value):
    status, body = await raw_request(
        strict_gw, head("/v1/sessions", b"Authorization: " + value)
    )
    assert (status, body["error"]["code"]) == (401, "unauthorized")


@pytest.mark.parametrize("value", [b"\xff\xfe", b"\xc2\xb2", b"\xd9\xa1", b"1\x80"])
async def test_undecodable_last_event_id_is_400_naming_it(strict_gw, http, value):
    sid = await create_session(http, strict_gw, "hdr")
    bearer = b"Authorization: Bearer " + token("hdr").encode()
    status, body = await raw_request(
        strict_gw,
        head(f"/v1/sessions/{sid}/events", bearer, b"Last-Event-ID: " + value),
    )
    assert status == 400, body
    assert body["error"]["code"] == "malformed_header"
    assert body["error"]["field"] == "Last-Event-ID"


async def test_non_ascii_digits_in_after_are_422(strict_gw, http):
    sid = await create_session(http, strict_gw, "hdr")
    for after in ("\u00b2", "\u0661"):  # superscript two, Arabic-Indic one
        async with http.get(
            f"{strict_gw.base}/v1/sessions/{sid}/events",
            params={"after": after, "follow": "0"},
            headers=auth("hdr"),
        ) as r:
            assert r.status == 422
            assert (await r.json())["error"]["field"] == "$.after"


async def _dropped(reader: asyncio.StreamReader) -> bool:
    """True once the server closes or resets the connection."""
    try:
        data = await reader.read()
    except ConnectionError:
        return True
    return data == b""


async def test_slowloris_sockets_are_dropped_and_the_gateway_serves_meanwhile(
    strict_gw, http
):
    sockets = []
    for _ in range(200):
        reader, writer = await asyncio.open_connection("127.0.0.1", strict_gw.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        sockets.append((reader, writer))
    try:
        # A well-behaved client is served while the trickling sockets are open.
        async with http.get(strict_gw.base + "/healthz") as r:
            assert r.status == 200
        for _, writer in sockets:
            writer.write(b"a")  # still trickling: not a complete head
        async with asyncio.timeout(HEADER_TIMEOUT_S + 15):
            dropped = await asyncio.gather(*(_dropped(r) for r, _ in sockets))
        assert all(dropped)
    finally:
        for _, writer in sockets:
            writer.close()
    async with http.get(strict_gw.base + "/metrics") as r:
        text = await r.text()
    counted = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("agentbus_gateway_header_timeouts_total")
    ]
    assert counted
    assert counted[0] >= 200


async def test_an_idle_keep_alive_connection_gets_the_same_deadline(strict_gw):
    reader, writer = await asyncio.open_connection("127.0.0.1", strict_gw.port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        async with asyncio.timeout(10):
            first = await reader.readuntil(b"\r\n\r\n")
        assert first.startswith(b"HTTP/1.1 200")
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
        async with asyncio.timeout(HEADER_TIMEOUT_S + 15):
            rest = b""
            while (chunk := await reader.read(65536)) != b"":
                rest += chunk  # the first answer's body
        assert b"HTTP/1.1" not in rest  # the unfinished request was never answered
    finally:
        writer.close()


async def test_a_stream_outlives_the_header_deadline(strict_gw, http):
    sid = await create_session(http, strict_gw, "hdr-sse")
    url = f"{strict_gw.base}/v1/sessions/{sid}/events"
    loop = asyncio.get_running_loop()
    async with http.get(url, headers=auth("hdr-sse")) as r:
        assert r.status == 200
        opened = loop.time()
        pings = 0
        async with asyncio.timeout(20):
            # Read heartbeats until well past the deadline: the stream stays open.
            while loop.time() - opened < HEADER_TIMEOUT_S * 3:
                line = await r.content.readline()
                assert line, "stream ended"
                pings += line.startswith(b": ping")
        assert pings >= 3


async def test_two_gateways_share_one_port_and_both_serve(
    nats_server, gw_prefix, tmp_path, http
):
    shared = {"AGENTBUS_GATEWAY_REUSE_PORT": "1"}
    first = await start_gateway(nats_server.url, gw_prefix, tmp_path / "a", **shared)
    second = GatewayProcess(
        nats_server.url, gw_prefix, tmp_path / "b", env=shared, port=first.port
    )
    second.start()
    try:
        # (ready() would be answered by the first process: wait for its own line)
        async with asyncio.timeout(20):
            while "gateway listening" not in second.logs():
                assert second.proc is not None
                assert second.proc.poll() is None, second.logs()  # EADDRINUSE
                await asyncio.sleep(0.05)
        for _ in range(20):  # fresh connections, spread by the kernel
            async with (
                aiohttp.ClientSession() as fresh,
                fresh.get(first.base + "/healthz") as r,
            ):
                assert r.status == 200
        assert first.stop() == 0, first.logs()
        async with aiohttp.ClientSession() as fresh:
            sid = await create_session(fresh, second, "shared-port")
        async with http.get(
            f"{second.base}/v1/sessions/{sid}", headers=auth("shared-port")
        ) as r:
            assert r.status == 200  # the second process serves the port alone
    finally:
        first.stop()
        assert second.stop() == 0, second.logs()


async def test_without_reuse_port_a_second_gateway_cannot_share_the_port(
    nats_server, gw_prefix, tmp_path
):
    first = await start_gateway(nats_server.url, gw_prefix, tmp_path / "a")
    second = GatewayProcess(nats_server.url, gw_prefix, tmp_path / "b", port=first.port)
    second.start()
    try:
        assert second.proc is not None
        assert second.proc.wait(30) != 0  # address in use: it exits
        assert "Address already in use" in second.logs()
    finally:
        second.stop()
        assert first.stop() == 0, first.logs()
