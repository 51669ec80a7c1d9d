"""envd ``/files``: download and upload (multipart, octet-stream, gzip).

The supervisor opens the file inside the sandbox (its root view, its uid) and
passes the descriptor; the host only ever reads or writes that descriptor.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import posixpath
import re
import stat
from typing import Any

from aiohttp import BodyPartReader, web

from services.sandboxhost.errors import EnvdRpcError
from services.sandboxhost.sandbox import LocalSandbox

SMALL = 1 << 20
CHUNK = 256 * 1024
META_PREFIX = "x-metadata-"
FILENAME = re.compile(r'filename="((?:[^"\\]|\\.)*)"')


def plain_error(status: int, message: str) -> web.Response:
    """envd's plain JSON error (integer code)."""
    return web.json_response({"code": status, "message": message}, status=status)


def files_error(exc: EnvdRpcError) -> web.Response:
    """Map a supervisor error onto /files statuses."""
    status = {
        "not_found": 404,
        "invalid_argument": 400,
        "permission_denied": 403,
        "resource_exhausted": 507,
        "unavailable": 502,
    }.get(exc.code, 500)
    return plain_error(status, exc.message)


async def download(request: web.Request, sandbox: LocalSandbox) -> web.StreamResponse:
    """``GET /files?path=``: the file's bytes."""
    path = request.query.get("path", "")
    if not path:
        return plain_error(400, "path is required")
    try:
        link, _ = sandbox.require_live()
        _, fds = await link.call("open", path=path, mode="r")
    except EnvdRpcError as exc:
        return files_error(exc)
    fd = fds[0]
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return plain_error(400, f"path '{path}' is not a regular file")
        size = info.st_size
        name = posixpath.basename(path)
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'inline; filename="{name}"',
        }
        if size <= SMALL:
            body = os.read(fd, size + 1)
            if request.headers.get("Accept-Encoding", "").strip() == "gzip":
                headers["Content-Encoding"] = "gzip"
                body = gzip.compress(body, compresslevel=1)
            return web.Response(body=body, headers=headers)
        return await _stream_file(request, fd, headers)
    finally:
        os.close(fd)


async def _stream_file(
    request: web.Request, fd: int, headers: dict[str, str]
) -> web.StreamResponse:
    resp = web.StreamResponse(headers=headers)
    if request.headers.get("Accept-Encoding", "").strip() == "gzip":
        resp.enable_compression()
    await resp.prepare(request)
    while True:
        chunk = await asyncio.to_thread(os.read, fd, CHUNK)
        if not chunk:
            break
        await resp.write(chunk)
    await resp.write_eof()
    return resp


def _metadata(request: web.Request) -> dict[str, str]:
    out = {}
    for key, value in request.headers.items():
        if key.lower().startswith(META_PREFIX):
            out[key[len(META_PREFIX) :].lower()] = value
    return out


async def upload(request: web.Request, sandbox: LocalSandbox) -> web.Response:
    """``POST /files``: write one or more files (parents created, overwritten)."""
    try:
        link, _ = sandbox.require_live()
        del link
        meta = _metadata(request)
        if request.content_type.startswith("multipart/"):
            written = await _upload_multipart(request, sandbox, meta)
        else:
            path = request.query.get("path", "")
            if not path:
                return plain_error(400, "path is required for octet-stream uploads")
            written = [
                await _write(sandbox, path, request.content.iter_chunked(CHUNK), meta)
            ]
    except EnvdRpcError as exc:
        return files_error(exc)
    if not written:
        return plain_error(400, "no file in the request")
    return web.json_response(written)


async def _upload_multipart(
    request: web.Request, sandbox: LocalSandbox, meta: dict[str, str]
) -> list[dict[str, Any]]:
    reader = await request.multipart()
    query_path = request.query.get("path")
    written: list[dict[str, Any]] = []
    seen: set[str] = set()
    async for part in reader:
        if not isinstance(part, BodyPartReader) or part.name != "file":
            continue
        path = query_path or _part_filename(part)
        if not path:
            raise EnvdRpcError("invalid_argument", "file part without a path")
        if path in seen:
            raise EnvdRpcError("invalid_argument", f"duplicate destination {path}")
        seen.add(path)
        written.append(await _write(sandbox, path, _part_chunks(part), meta))
    return written


def _part_filename(part: BodyPartReader) -> str:
    """The part's filename verbatim (aiohttp strips a leading ``/`` from it)."""
    header = part.headers.get("Content-Disposition", "")
    match = FILENAME.search(header)
    if match is None:
        return part.filename or ""
    return match.group(1).replace('\\"', '"')


async def _part_chunks(part: BodyPartReader) -> Any:
    while True:
        chunk = await part.read_chunk(CHUNK)
        if not chunk:
            return
        yield chunk


async def _write(
    sandbox: LocalSandbox, path: str, chunks: Any, meta: dict[str, str]
) -> dict[str, Any]:
    link, _ = sandbox.require_live()
    reply, fds = await link.call("open", path=path, mode="w")
    fd = fds[0]
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise EnvdRpcError(
                "invalid_argument", f"path '{path}' is not a regular file"
            )
        async for chunk in chunks:
            _write_all(fd, chunk)
        _replace_metadata(fd, meta)
    except OSError as exc:
        code = "resource_exhausted" if exc.errno == 28 else "internal"
        raise EnvdRpcError(code, f"write {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)
    shown = str(reply["path"])
    return {"name": posixpath.basename(shown), "type": "file", "path": shown}


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace_metadata(fd: int, meta: dict[str, str]) -> None:
    """Each upload replaces the file's ``user.e2b.*`` attributes."""
    with contextlib.suppress(OSError):
        for name in os.listxattr(fd):
            if name.startswith("user.e2b."):
                os.removexattr(fd, name)
    for key, value in meta.items():
        os.setxattr(fd, f"user.e2b.{key}", value.encode())
