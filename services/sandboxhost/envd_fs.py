"""envd ``filesystem.Filesystem`` RPCs (all path work happens inside the sandbox)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any

from aiohttp import web

from services.sandboxhost.connect import (
    end_of_stream,
    envelope,
    first_envelope,
    open_stream,
    unary_body,
)
from services.sandboxhost.envd_process import keepalive_interval
from services.sandboxhost.errors import EnvdRpcError
from services.sandboxhost.sandbox import LocalSandbox
from services.sandboxhost.watch import DirWatch, FsEvent, fs_event

ENTRY_EVENTS = {"EVENT_TYPE_CREATE", "EVENT_TYPE_WRITE", "EVENT_TYPE_CHMOD"}


async def stat(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """EntryInfo of a path."""
    msg = await unary_body(request)
    link, _ = sandbox.require_live()
    reply, _ = await link.call("stat", path=msg.get("path"))
    return {"entry": reply["entry"]}


async def list_dir(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """Directory entries up to a depth."""
    msg = await unary_body(request)
    link, _ = sandbox.require_live()
    reply, _ = await link.call("list", path=msg.get("path"), depth=msg.get("depth", 1))
    return {"entries": reply["entries"]}


async def make_dir(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """Create a directory with its parents."""
    msg = await unary_body(request)
    link, _ = sandbox.require_live()
    reply, _ = await link.call("mkdir", path=msg.get("path"))
    return {"entry": reply["entry"]}


async def move(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """Rename a path."""
    msg = await unary_body(request)
    link, _ = sandbox.require_live()
    reply, _ = await link.call(
        "move", source=msg.get("source"), destination=msg.get("destination")
    )
    return {"entry": reply["entry"]}


async def remove(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """``rm -rf`` a path."""
    msg = await unary_body(request)
    link, _ = sandbox.require_live()
    await link.call("remove", path=msg.get("path"))
    return {}


class Watcher:
    """A directory watch feeding a queue of FilesystemEvent JSON objects."""

    def __init__(self, sandbox: LocalSandbox, root: str, include_entry: bool) -> None:
        self.sandbox = sandbox
        self.root = root
        self.include_entry = include_entry
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.watch: DirWatch | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls, sandbox: LocalSandbox, msg: dict[str, Any]) -> Watcher:
        """Open the directory inside the sandbox and start watching it."""
        link, _ = sandbox.require_live()
        reply, fds = await link.call("opendir", path=msg.get("path"))
        self = cls(sandbox, str(reply["path"]), bool(msg.get("includeEntry")))
        self.watch = DirWatch(fds[0], bool(msg.get("recursive")), self._on_event)
        return self

    def _on_event(self, event: FsEvent) -> None:
        name, kind = event
        if not (self.include_entry and kind in ENTRY_EVENTS):
            self.queue.put_nowait(fs_event(name, kind, None))
            return
        task = asyncio.get_running_loop().create_task(self._with_entry(name, kind))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _with_entry(self, name: str, kind: str) -> None:
        entry = None
        with contextlib.suppress(EnvdRpcError):
            link, _ = self.sandbox.require_live()
            reply, _ = await link.call("stat", path=f"{self.root.rstrip('/')}/{name}")
            entry = reply["entry"]
        self.queue.put_nowait(fs_event(name, kind, entry))

    def drain(self) -> list[dict[str, Any]]:
        """Events queued since the last call."""
        out = []
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item is not None:
                out.append(item)
        return out

    def close(self) -> None:
        """Stop watching; a streaming client gets its end."""
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        self.queue.put_nowait(None)


async def watch_dir(request: web.Request, sandbox: LocalSandbox) -> web.StreamResponse:
    """Stream filesystem events of a directory until the client leaves."""
    msg = await first_envelope(request)
    try:
        watcher = await Watcher.open(sandbox, msg)
    except EnvdRpcError as exc:
        resp = await open_stream(request)
        await resp.write(end_of_stream(exc))
        return resp
    key = "stream-" + secrets.token_hex(8)
    sandbox.watchers[key] = watcher
    interval = keepalive_interval(request)
    resp = await open_stream(request)
    try:
        await resp.write(envelope({"start": {}}))
        while True:
            try:
                async with asyncio.timeout(interval):
                    item = await watcher.queue.get()
            except TimeoutError:
                await resp.write(envelope({"keepalive": {}}))
                continue
            if item is None:
                break
            await resp.write(envelope({"filesystem": item}))
        await resp.write(end_of_stream())
    finally:
        sandbox.watchers.pop(key, None)
        watcher.close()
    return resp


async def create_watcher(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """Start a polling watcher (the sync SDK's watch_dir)."""
    msg = await unary_body(request)
    watcher = await Watcher.open(sandbox, msg)
    watcher_id = secrets.token_hex(8)
    sandbox.watchers[watcher_id] = watcher
    return {"watcherId": watcher_id}


def _watcher(sandbox: LocalSandbox, msg: dict[str, Any]) -> Watcher:
    watcher = sandbox.watchers.get(str(msg.get("watcherId")))
    if not isinstance(watcher, Watcher):
        raise EnvdRpcError("not_found", f"watcher {msg.get('watcherId')} not found")
    return watcher


async def get_watcher_events(
    request: web.Request, sandbox: LocalSandbox
) -> dict[str, Any]:
    """Events of a polling watcher since the last call."""
    msg = await unary_body(request)
    await asyncio.sleep(0)  # let pending entry lookups land
    return {"events": _watcher(sandbox, msg).drain()}


async def remove_watcher(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """Stop a polling watcher."""
    msg = await unary_body(request)
    watcher = _watcher(sandbox, msg)
    sandbox.watchers.pop(str(msg.get("watcherId")), None)
    watcher.close()
    return {}
