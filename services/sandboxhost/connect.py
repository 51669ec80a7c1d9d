"""Connect protocol framing (JSON codec) on aiohttp: unary and streaming RPCs."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from aiohttp import web

from schemas.envd import ConnectErrorBody, EndOfStream
from services.sandboxhost.errors import EnvdRpcError

STREAM_TYPE = "application/connect+json"
HEADER = struct.Struct(">BI")
END_STREAM = 0x02
MAX_MESSAGE = 64 * 1024 * 1024


def dumps(msg: Any) -> bytes:
    """Compact JSON bytes of a message (a ``schemas.envd`` Struct or a dict).

    Through ``json`` (ASCII-escaped), so the bytes are those this host always
    sent; ``to_builtins`` applies the Structs' camelCase names and omitted
    defaults, and turns bytes into base64.
    """
    return json.dumps(msgspec.to_builtins(msg), separators=(",", ":")).encode()


def envelope(msg: Any, flags: int = 0) -> bytes:
    """One Connect stream message: flags, big-endian length, JSON payload."""
    data = dumps(msg)
    return HEADER.pack(flags, len(data)) + data


def end_of_stream(error: EnvdRpcError | None = None) -> bytes:
    """The final (0x02) envelope: ``{}`` or the error."""
    body = None if error is None else ConnectErrorBody(error.code, error.message)
    return envelope(EndOfStream(error=body), END_STREAM)


def unary_error(error: EnvdRpcError) -> web.Response:
    """A unary Connect error response."""
    body = ConnectErrorBody(error.code, error.message)
    return web.json_response(msgspec.to_builtins(body), status=error.status)


async def unary_body(request: web.Request) -> dict[str, Any]:
    """The JSON request message of a unary call."""
    raw = await request.read()
    if not raw:
        return {}
    try:
        msg = json.loads(raw)
    except ValueError as exc:
        raise EnvdRpcError("invalid_argument", f"request is not JSON: {exc}") from exc
    if not isinstance(msg, dict):
        raise EnvdRpcError("invalid_argument", "request must be a JSON object")
    return msg


async def read_envelopes(request: web.Request) -> AsyncIterator[dict[str, Any]]:
    """Messages of a streaming request body, as they arrive."""
    content = request.content
    while True:
        try:
            header = await content.readexactly(HEADER.size)
        except EOFError:  # IncompleteReadError is an EOFError
            return
        flags, length = HEADER.unpack(header)
        if length > MAX_MESSAGE:
            raise EnvdRpcError("resource_exhausted", "message too large")
        payload = await content.readexactly(length) if length else b"{}"
        if flags & END_STREAM:
            return
        msg = json.loads(payload)
        if isinstance(msg, dict):
            yield msg


async def first_envelope(request: web.Request) -> dict[str, Any]:
    """The single request message of a server-streaming call."""
    async for msg in read_envelopes(request):
        return msg
    return {}


async def open_stream(request: web.Request) -> web.StreamResponse:
    """Start a 200 streaming response."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": STREAM_TYPE})
    await resp.prepare(request)
    return resp


def timeout_ms(request: web.Request) -> float:
    """The client's ``connect-timeout-ms`` in seconds (0: none)."""
    raw = request.headers.get("connect-timeout-ms", "")
    try:
        return max(int(raw), 0) / 1000 if raw else 0.0
    except ValueError:
        return 0.0


def rpc_user(request: web.Request) -> str | None:
    """The user of an RPC (Basic auth username), or None for the default."""
    auth = request.headers.get("Authorization", "")
    if not auth.lower().startswith("basic "):
        return None
    try:
        raw = base64.b64decode(auth[6:]).decode()
    except (ValueError, UnicodeDecodeError):
        return ""
    return raw.split(":", 1)[0]
