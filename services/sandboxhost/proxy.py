"""Ports a sandbox serves, reached through the host's one listener (``get_host``).

E2B names a sandbox's port ``<port>-<sandbox id>.<domain>``; a request whose
``Host`` header has that shape is forwarded to that port on the sandbox's own
loopback. The connection is opened *inside* the sandbox's network namespace by
its supervisor (``dial``) and handed to the host as a descriptor, so no
namespace is shared and nothing else of the sandbox is reachable.

HTTP/1.1 only, one request per upstream connection (``Connection: close``);
request bodies are buffered (up to the app's ``client_max_size``), responses
streamed. WebSocket upgrades are refused (501).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from services.sandboxhost.errors import ControlError, EnvdRpcError
from services.sandboxhost.host import SandboxHost

HOST_RE = re.compile(r"^(\d{1,5})-([a-z0-9]+)\.")
ENVD_PORT = 49983
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def target(request: web.Request) -> tuple[int, str] | None:
    """(port, sandbox id) named by the Host header, if it is a sandbox URL."""
    m = HOST_RE.match(request.headers.get("Host", ""))
    if m is None or int(m.group(1)) in (0, ENVD_PORT) or int(m.group(1)) > 65535:
        return None
    return int(m.group(1)), m.group(2)


def _error(status: int, message: str, sid: str, port: int) -> web.Response:
    body = {"message": message, "sandboxId": sid, "port": port}
    return web.json_response(body, status=status)


def middleware(host: SandboxHost) -> Middleware:
    """aiohttp middleware: sandbox URLs are proxied, everything else served."""

    @web.middleware
    async def proxy(request: web.Request, handler: Handler) -> web.StreamResponse:
        named = target(request)
        if named is None:
            return await handler(request)
        return await forward(host, request, *named)

    return proxy


async def forward(
    host: SandboxHost, request: web.Request, port: int, sid: str
) -> web.StreamResponse:
    """One request to the sandbox's port, its answer streamed back."""
    sandbox = host.sandboxes.get(sid)
    if sandbox is None:
        return _error(404, f"The sandbox {sid} was not found", sid, port)
    if request.headers.get("Upgrade"):
        return _error(501, "upgrades (WebSocket) are not proxied", sid, port)
    if sandbox.record.state == "paused" and sandbox.record.auto_resume:
        # E2B's auto-resume: HTTP traffic to a paused sandbox's port wakes it.
        try:
            sandbox, _ = await host.connect(sid, None)
        except ControlError as exc:
            return _error(502, f"paused; auto-resume failed: {exc.message}", sid, port)
    try:
        link, _ = sandbox.require_live()
        _, fds = await link.call("dial", port=port)
    except EnvdRpcError as exc:
        return _error(
            502,
            f"The sandbox is running but port is not open ({exc.message})",
            sid,
            port,
        )
    sock = socket.socket(fileno=fds[0])
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        writer.write(_request_head(request, await request.read()))
        await writer.drain()
        return await _relay(request, reader)
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        return _error(502, f"bad answer from the sandbox's port: {exc}", sid, port)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _request_head(request: web.Request, body: bytes) -> bytes:
    lines = [f"{request.method} {request.rel_url} HTTP/1.1"]
    for name, value in request.headers.items():
        if name.lower() not in HOP_BY_HOP:
            lines.append(f"{name}: {value}")
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1", "replace") + body


async def _relay(
    request: web.Request, reader: asyncio.StreamReader
) -> web.StreamResponse:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ", 2)[1])
    resp = web.StreamResponse(status=status)
    chunked, length = False, None
    for line in filter(None, header_lines):
        name, _, value = line.partition(":")
        key, value = name.strip().lower(), value.strip()
        if key == "transfer-encoding":
            chunked = "chunked" in value.lower()
        elif key == "content-length":
            length = int(value)
        if key not in HOP_BY_HOP:
            resp.headers.add(name.strip(), value)
    if length is not None and not chunked:
        resp.content_length = length
    await resp.prepare(request)
    if request.method != "HEAD" and status not in (204, 304):
        await _copy_body(reader, resp, chunked, length)
    await resp.write_eof()
    return resp


async def _copy_body(
    reader: asyncio.StreamReader,
    resp: web.StreamResponse,
    chunked: bool,
    length: int | None,
) -> None:
    if chunked:
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            await resp.write(await reader.readexactly(size))
            await reader.readexactly(2)
        return
    remaining = length
    while remaining is None or remaining > 0:
        data = await reader.read(65536 if remaining is None else min(65536, remaining))
        if not data:
            return
        await resp.write(data)
        if remaining is not None:
            remaining -= len(data)
