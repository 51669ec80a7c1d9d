"""The broker side of the App's file API (gateway ↔ broker over NATS, chunked).

``stat`` stages a file into a local spool file (from the sandbox, or from the
archive without waking one) and hands out a handle; ``read`` serves chunks of
it. Handles are replica-local, so ``read`` is subscribed without a queue group
and only the replica that owns a handle answers. Uploads are replica-agnostic:
each chunk lands as a part file inside the sandbox; the last chunk joins them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
import secrets
import shlex
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import IO, Literal, cast

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from schemas.files import (
    EOF_HEADER,
    ERROR_HEADER,
    OFFSET_HEADER,
    PATH_HEADER,
    SESSION_HEADER,
    UPLOAD_HEADER,
    DirEntry,
    FileError,
    FileInfo,
    FileRead,
    FileStat,
    FileWritten,
    workspace_relative,
)
from schemas.names import BusNames
from services.broker.archive import SCRATCH, WORKSPACE, Archiver, Entry, Manifest
from services.broker.errors import FileApiError, SandboxError
from services.broker.lifecycle import Lifecycle, SessionDeletedError
from services.broker.records import SandboxRecord
from services.broker.settings import BrokerSettings
from services.common.request import answering
from services.envd import EnvdClient, EnvdError, EnvdNotFound

log = logging.getLogger(__name__)
STAGE_TTL_S = 300.0
_stat = msgspec.json.Decoder(FileStat)
_read = msgspec.json.Decoder(FileRead)
_TYPES = {"f": "file", "d": "dir", "l": "symlink"}


def lexical(path: str) -> str:
    """A normalised workspace-relative path, or ``path_outside_workspace``."""
    try:
        return workspace_relative(path)
    except ValueError as exc:
        raise FileApiError("path_outside_workspace", str(exc)) from exc


Handler = Callable[[Msg], Awaitable[None]]
Spawn = Callable[[Handler], Handler]


def _inline(handler: Handler) -> Handler:
    return handler


class Staged(msgspec.Struct):
    """A file spooled for reading by handle."""

    spool: IO[bytes]
    size: int
    expires: float


class FileServer:
    """Answers stat/read/write for every session's workspace."""

    def __init__(
        self,
        life: Lifecycle,
        archiver: Archiver,
        settings: BrokerSettings,
        replica: str,
    ) -> None:
        self.life = life
        self.archiver = archiver
        self.spool_dir = settings.broker_staging_dir or None
        self.max_upload = int(settings.broker_upload_max_mb * 1024 * 1024)
        self.replica = replica
        self._staged: dict[str, Staged] = {}

    async def subscribe(
        self, nc: Client, names: BusNames, queue: str, spawn: Spawn = _inline
    ) -> list[Subscription]:
        """stat and write in the queue group; read on every replica.

        ``spawn`` wraps each handler (the broker runs them concurrently).
        """
        self._nc = nc
        stat, write = spawn(self._guard(self.stat)), spawn(self._guard(self.write))
        return [
            await nc.subscribe(names.broker_file("stat"), queue, cb=stat),
            await nc.subscribe(names.broker_file("write"), queue, cb=write),
            await nc.subscribe(names.broker_file("read"), cb=self.read),
        ]

    def _guard(
        self, fn: Callable[[Msg], Awaitable[bytes]]
    ) -> Callable[[Msg], Awaitable[None]]:
        async def handler(msg: Msg) -> None:
            try:
                async with answering(self._nc, msg):
                    body = await fn(msg)
                await msg.respond(body)
            except FileApiError as exc:
                await _error(self._nc, msg, exc.code, exc.message, exc.status)
            except SessionDeletedError as exc:
                await _error(self._nc, msg, "not_found", str(exc), 404)
            except EnvdNotFound as exc:
                await _error(self._nc, msg, "not_found", str(exc), 404)
            except (SandboxError, EnvdError) as exc:
                await _error(self._nc, msg, "sandbox_unavailable", str(exc), 503)
            except Exception:
                log.exception("file API %s failed", msg.subject)
                await _error(self._nc, msg, "internal", "the broker failed", 500)

        return handler

    # ---- stat -------------------------------------------------------------------

    async def stat(self, msg: Msg) -> bytes:
        """What is at a path: a listing, or a staged file's handle."""
        try:
            req = _stat.decode(msg.data)
        except msgspec.ValidationError as exc:
            raise FileApiError("bad_request", str(exc)) from exc
        rel = lexical(req.path)
        rec = (await self.life.store.get(req.session_id)).record
        if rec.state in ("none", "deleted", "deleting"):
            if rel == "" and rec.state == "none":
                return msgspec.json.encode(FileInfo(kind="dir"))
            raise FileApiError("not_found", f"{rel!r} not found", 404)
        if rec.sandbox_id is None and rec.last_archive:
            return msgspec.json.encode(await self._from_archive(rec, rel))
        rec = await self.life.checked(req.session_id, "file API")
        await self.life.touch(req.session_id)
        return msgspec.json.encode(await self._from_sandbox(rec, rel))

    async def _realpath(self, envd: EnvdClient, rel: str) -> str:
        full = posixpath.join(WORKSPACE, rel) if rel else WORKSPACE
        res = await envd.run(f"realpath -m -- {shlex.quote(full)}", timeout_s=30)
        real = res.stdout.decode("utf-8", "surrogateescape").strip()
        if res.exit_code != 0 or not (
            real == WORKSPACE or real.startswith(WORKSPACE + "/")
        ):
            raise FileApiError(
                "path_outside_workspace", f"{rel!r} leaves the workspace"
            )
        return real

    async def _from_sandbox(self, rec: SandboxRecord, rel: str) -> FileInfo:
        envd = self.life.envd(rec)
        real = await self._realpath(envd, rel)
        info = await envd.stat(real)
        if info.kind == "dir":
            listing = await envd.list_dir(real, 1)
            entries = [
                DirEntry(
                    name=e.name,
                    type="symlink"
                    if e.is_symlink
                    else ("dir" if e.kind == "dir" else "file"),
                    size=int(e.size or 0),
                    modified=e.modified_time or "",
                )
                for e in listing
            ]
            return FileInfo(kind="dir", entries=sorted(entries, key=lambda e: e.name))
        spool = self._spool()
        size = await self.life.link(rec).download(self.life.http, real, spool)
        return FileInfo(kind="file", size=size, handle=self._stage(spool, size))

    async def _from_archive(self, rec: SandboxRecord, rel: str) -> FileInfo:
        manifest = await self.archiver.load(rec.last_archive or "")
        path = resolve_archived(manifest, rel)
        if path == "" or manifest.entries[path].type == "d":
            return FileInfo(
                kind="dir", entries=list_archived(manifest, path), source="archive"
            )
        spool = self._spool()
        size = await self.archiver.extract(manifest, path, spool)
        return FileInfo(
            kind="file", size=size, handle=self._stage(spool, size), source="archive"
        )

    def _spool(self) -> IO[bytes]:
        return tempfile.TemporaryFile(dir=self.spool_dir)

    def _stage(self, spool: IO[bytes], size: int) -> str:
        handle = f"{self.replica}.{secrets.token_urlsafe(16)}"
        self._staged[handle] = Staged(spool, size, time.monotonic() + STAGE_TTL_S)
        return handle

    # ---- read -------------------------------------------------------------------

    async def read(self, msg: Msg) -> None:
        """Serve a chunk of a staged file (only the owning replica answers)."""
        try:
            req = _read.decode(msg.data)
        except msgspec.DecodeError:
            return
        if not req.handle.startswith(self.replica + "."):
            return
        staged = self._staged.get(req.handle)
        if staged is None:
            await _error(self._nc, msg, "not_found", "read handle expired", 404)
            return
        staged.spool.seek(req.offset)
        data = staged.spool.read(max(0, min(req.length, 4 << 20)))
        eof = req.offset + len(data) >= staged.size
        headers = {EOF_HEADER: "1"} if eof else {}
        if eof:
            self._drop(req.handle)
        else:
            staged.expires = time.monotonic() + STAGE_TTL_S
        await self._nc.publish(msg.reply, data, headers=headers)

    def _drop(self, handle: str) -> None:
        staged = self._staged.pop(handle, None)
        if staged is not None:
            staged.spool.close()

    async def expire_loop(self, stop: asyncio.Event) -> None:
        """Close staged files nobody finished reading."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 30)
            now = time.monotonic()
            for handle in [h for h, s in self._staged.items() if s.expires < now]:
                self._drop(handle)
        for handle in list(self._staged):
            self._drop(handle)

    # ---- write ------------------------------------------------------------------

    async def write(self, msg: Msg) -> bytes:
        """One upload chunk; the last one puts the file in place.

        Idempotent, so a chunk can be retried on any replica: a chunk is a
        part file named by its offset, and the join leaves a marker that makes
        a retried final chunk answer again instead of failing.
        """
        sid, rel, upload, offset, eof = _write_headers(msg.headers or {})
        size = offset + len(msg.data)
        if size > self.max_upload:
            raise FileApiError(
                "file_too_large",
                f"uploads are limited to {self.max_upload} bytes",
                413,
            )
        rec = await self.life.checked(sid, "file API")
        await self.life.touch(sid)
        envd = self.life.envd(rec)
        if offset == 0 and eof:
            real = await self._realpath(envd, rel)
            await envd.write_bytes(real, msg.data)
            return msgspec.json.encode(FileWritten(path=rel, size=len(msg.data)))
        parts = f"{SCRATCH}/up/{upload or 'anon'}"
        await envd.write_bytes(f"{parts}/{offset:016d}", msg.data)
        if eof:
            await self._join(envd, rel, parts)
        return msgspec.json.encode(FileWritten(path=rel, size=size))

    async def _join(self, envd: EnvdClient, rel: str, parts: str) -> None:
        real = await self._realpath(envd, rel)
        tmp = f"{real}.agentbus-upload"
        q = shlex.quote
        done = q(parts + ".done")
        cmd = (
            f"if [ -e {done} ]; then rm -rf -- {q(parts)}; exit 0; fi; "
            f"mkdir -p -- {q(posixpath.dirname(real))} && cat {q(parts)}/* > {q(tmp)}"
            f" && mv -f -- {q(tmp)} {q(real)} && : > {done}; rc=$?;"
            f" rm -rf -- {q(parts)}; exit $rc"
        )
        res = await envd.run(cmd, timeout_s=600)
        if res.exit_code != 0:
            raise FileApiError(
                "write_failed", res.stderr.decode(errors="replace")[:300], 500
            )


def _write_headers(h: dict[str, str]) -> tuple[str, str, str, int, bool]:
    """(session, path, upload id, offset, eof) of a write chunk, checked."""
    rel = lexical(h.get(PATH_HEADER, ""))
    if not rel:
        raise FileApiError("bad_request", "a file path is required")
    upload = "".join(c for c in h.get(UPLOAD_HEADER, "") if c.isalnum() or c in "-_")
    raw = h.get(OFFSET_HEADER, "0") or "0"
    if not raw.isdigit():
        raise FileApiError("bad_request", f"offset {raw[:40]!r} is not a number")
    return h.get(SESSION_HEADER, ""), rel, upload, int(raw), h.get(EOF_HEADER) == "1"


async def _error(nc: Client, msg: Msg, code: str, message: str, status: int) -> None:
    body = msgspec.json.encode(FileError(code=code, message=message, status=status))
    # Msg.respond cannot carry headers; publish to the reply inbox directly.
    await nc.publish(msg.reply, body, headers={ERROR_HEADER: "1"})


def resolve_archived(manifest: Manifest, rel: str, hops: int = 40) -> str:
    """Follow archived symlinks inside the workspace; refuse ones that leave it."""
    return _walk(manifest.entries, [p for p in rel.split("/") if p], hops)


def _walk(entries: dict[str, Entry], parts: list[str], hops: int) -> str:
    cur = ""
    while parts:
        cand = f"{cur}/{parts.pop(0)}" if cur else parts.pop(0)
        entry = entries.get(cand)
        if entry is None:
            raise FileApiError("not_found", f"{cand!r} not found", 404)
        if entry.type != "l":
            cur = cand
            continue
        hops -= 1
        if hops < 0:
            raise FileApiError("path_outside_workspace", "too many symlink hops")
        target = entry.target
        if target.startswith("/"):
            if not (target == WORKSPACE or target.startswith(WORKSPACE + "/")):
                raise FileApiError(
                    "path_outside_workspace", f"{cand!r} leaves the workspace"
                )
            joined = posixpath.normpath(target)[len(WORKSPACE) + 1 :]
        else:
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(cand), target))
        if joined == ".." or joined.startswith("../"):
            raise FileApiError(
                "path_outside_workspace", f"{cand!r} leaves the workspace"
            )
        parts = [p for p in joined.split("/") if p and p != "."] + parts
        cur = ""
    return cur


def list_archived(manifest: Manifest, path: str) -> list[DirEntry]:
    """Direct children of an archived directory."""
    out = []
    for p, e in manifest.entries.items():
        if posixpath.dirname(p) != path:
            continue
        modified = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(e.mtime or 0)))
        kind = cast(Literal["file", "dir", "symlink"], _TYPES.get(e.type, "file"))
        out.append(
            DirEntry(
                name=posixpath.basename(p), type=kind, size=e.size, modified=modified
            )
        )
    return sorted(out, key=lambda d: d.name)
