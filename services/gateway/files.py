"""The App's file API on the gateway: ``GET``/``PUT /v1/sessions/{sid}/files/{path}``.

The gateway authenticates, checks ownership and refuses lexically bad paths,
then asks the broker over NATS (no HTTP between services); bytes move in
``CHUNK_SIZE`` pieces both ways, so memory stays constant whatever the size.
Symlink escapes are refused by the broker, which sees the sandbox (or archive).

Wiring: ``app[FILE_DEPS] = FileDeps(...)`` then ``setup_file_routes(app)``.
"""

from __future__ import annotations

import mimetypes
import posixpath
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web
from nats.aio.client import Client

from schemas.files import (
    CHUNK_SIZE,
    EOF_HEADER,
    ERROR_HEADER,
    OFFSET_HEADER,
    PATH_HEADER,
    SESSION_HEADER,
    UPLOAD_HEADER,
    FileError,
    FileInfo,
    FileRead,
    FileStat,
    FileWritten,
    workspace_relative,
)
from schemas.names import BusNames
from services.common.request import NoAnswerError, ask
from services.gateway.auth import authenticate
from services.gateway.errors import GatewayError

RETRY_LATER = {"Retry-After": "2"}  # api.md: a 503 names when to retry
_info = msgspec.json.Decoder(FileInfo)
_written = msgspec.json.Decoder(FileWritten)
_error = msgspec.json.Decoder(FileError)


@dataclass(frozen=True)
class FileDeps:
    """What the file routes need from the gateway."""

    nc: Client
    names: BusNames
    secret: bytes
    owned: Callable[[str, str], Awaitable[Any]]
    timeout_s: float = 120.0
    silence_s: float = 3.0
    # How long failed tries (no broker, or one fell silent) are retried.
    retry_s: float = 10.0


FILE_DEPS = web.AppKey("agentbus_file_deps", FileDeps)


def setup_file_routes(app: web.Application) -> None:
    """Add the two file routes (``app[FILE_DEPS]`` must be set)."""
    path = "/v1/sessions/{sid}/files/{path:.*}"
    app.router.add_get(path, get_file, name="get_file")
    app.router.add_put(path, put_file, name="put_file")


def workspace_path(raw: str) -> str:
    """The normalised relative path, or 400 ``path_outside_workspace``."""
    try:
        return workspace_relative(raw)
    except ValueError as exc:
        raise GatewayError(
            400,
            "path_outside_workspace",
            f"the path must stay inside the workspace: {exc}",
        ) from exc


async def _owned(request: web.Request) -> tuple[FileDeps, str, str]:
    deps = request.app[FILE_DEPS]
    device = authenticate(deps.secret, request.headers.get("Authorization"))
    sid = request.match_info["sid"]
    await deps.owned(sid, device)
    return deps, sid, workspace_path(request.match_info["path"])


async def _ask(
    deps: FileDeps,
    subject: str,
    body: bytes,
    headers: dict[str, str] | None = None,
    total_s: float | None = None,
) -> tuple[bytes, dict[str, str]]:
    """Every request is idempotent, so a broker that dies mid-request costs a
    few seconds of silence, then another replica answers (``ask``)."""
    try:
        msg = await ask(
            deps.nc,
            subject,
            body,
            headers,
            silence_s=deps.silence_s,
            total_s=total_s or deps.timeout_s,
            retry_s=deps.retry_s,
        )
    except NoAnswerError as exc:
        raise GatewayError(
            503,
            "unavailable",  # the gateway's code for any dependency that is down
            f"no broker answered: {exc.reason}",
            headers=RETRY_LATER,
        ) from exc
    hdrs = msg.headers or {}
    if hdrs.get(ERROR_HEADER):
        err = _error.decode(msg.data)
        later = RETRY_LATER if err.status == 503 else None
        raise GatewayError(err.status, err.code, err.message, headers=later)
    return msg.data, hdrs


async def get_file(request: web.Request) -> web.StreamResponse:
    """A file's bytes, or a directory's entries."""
    deps, sid, rel = await _owned(request)
    data, _ = await _ask(
        deps,
        deps.names.broker_file("stat"),
        msgspec.json.encode(FileStat(session_id=sid, path=rel)),
    )
    info = _info.decode(data)
    if info.kind == "dir":
        body = msgspec.json.encode({"entries": info.entries})
        return web.Response(body=body, content_type="application/json")
    ctype = (
        mimetypes.guess_type(posixpath.basename(rel))[0] or "application/octet-stream"
    )
    resp = web.StreamResponse(
        headers={"Content-Type": ctype, "Content-Length": str(info.size)}
    )
    await resp.prepare(request)
    offset = 0
    while offset < info.size:
        chunk, hdrs = await _ask(
            deps,
            deps.names.broker_file("read"),
            msgspec.json.encode(FileRead(handle=info.handle or "", offset=offset)),
            # A handle lives on one replica: if it died, no retry can help.
            total_s=2 * deps.silence_s,
        )
        await resp.write(chunk)
        offset += len(chunk)
        if hdrs.get(EOF_HEADER) or not chunk:
            break
    await resp.write_eof()
    return resp


async def _read_full(request: web.Request) -> bytes:
    buf = bytearray()
    while len(buf) < CHUNK_SIZE:
        part = await request.content.read(CHUNK_SIZE - len(buf))
        if not part:
            break
        buf += part
    return bytes(buf)


async def put_file(request: web.Request) -> web.Response:
    """Create or replace a file from the raw body; parents are created."""
    deps, sid, rel = await _owned(request)
    if not rel:
        raise GatewayError(400, "invalid_path", "a file path is required")
    upload = secrets.token_hex(8)
    offset = 0
    chunk = await _read_full(request)
    while True:
        nxt = await _read_full(request) if len(chunk) == CHUNK_SIZE else b""
        headers = {
            SESSION_HEADER: sid,
            PATH_HEADER: rel,
            UPLOAD_HEADER: upload,
            OFFSET_HEADER: str(offset),
        }
        if not nxt:
            headers[EOF_HEADER] = "1"
        data, _ = await _ask(deps, deps.names.broker_file("write"), chunk, headers)
        offset += len(chunk)
        if not nxt:
            written = _written.decode(data)
            body = msgspec.json.encode({"path": written.path, "size": written.size})
            return web.Response(body=body, content_type="application/json")
        chunk = nxt
