"""Restore after a host restart: listen first, boot running sandboxes behind it.

Loading the records is cheap and happens before the port opens; booting every
sandbox that was running is not (a jail each), so it runs in the background,
``sandboxhost_restore_concurrency`` at a time, most recently active first (the
latest deadline: every refresh/connect moves it). A request that names a
sandbox still restoring waits for that sandbox's boot (at most
``sandboxhost_restore_wait_s``, then 503 "restoring"); requests naming no
sandbox, or one the host does not know, are not held.

Kill is safe at any point: a boot and a kill both hold the sandbox's lock, and
a boot whose sandbox was killed (or paused) meanwhile is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from services.sandboxhost import tokens
from services.sandboxhost.envd_routes import unauthorized
from services.sandboxhost.errors import ControlError, JailError
from services.sandboxhost.host import SandboxHost
from services.sandboxhost.layers import unmount
from services.sandboxhost.proxy import HOST_RE
from services.sandboxhost.sandbox import LocalSandbox

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def load(host: SandboxHost) -> list[LocalSandbox]:
    """Register every record; the running ones to boot, most recent first."""
    now = time.time()
    to_boot: list[LocalSandbox] = []
    for record in host.store.load_all():
        sandbox = host._wrap(record)
        host.sandboxes[record.sandbox_id] = sandbox
        record.processes_lost_at = now
        if record.state == "paused":
            record.pause_mode = "filesystem"
            if record.overlay:  # a mount left by a host that died
                await asyncio.to_thread(unmount, sandbox.dir / "fs")
            _restored(sandbox)
        else:
            host.restoring[record.sandbox_id] = asyncio.Event()
            to_boot.append(sandbox)
        host.store.save(record)
    to_boot.sort(key=lambda s: s.record.end_at, reverse=True)
    return to_boot


async def boot_all(host: SandboxHost, sandboxes: list[LocalSandbox]) -> None:
    """Boot ``sandboxes`` in the background, a bounded number at a time."""
    started = time.monotonic()
    limit = asyncio.Semaphore(max(host.settings.sandboxhost_restore_concurrency, 1))

    async def one(sandbox: LocalSandbox) -> None:
        async with limit:
            await host.restore_gate.wait()
            try:
                await _boot(host, sandbox)
            except Exception:  # one sandbox's bug must not end the host
                log.exception("restore of sandbox %s failed", sandbox.sandbox_id)

    try:
        async with asyncio.TaskGroup() as tg:
            for sandbox in sandboxes:
                tg.create_task(one(sandbox))
    finally:
        for sandbox in sandboxes:  # cancelled: nobody may wait on them forever
            host.restoring.pop(sandbox.sandbox_id, asyncio.Event()).set()
    log.info(
        "restore over: %d running sandboxes handled in %.2fs",
        len(sandboxes),
        time.monotonic() - started,
    )


async def _boot(host: SandboxHost, sandbox: LocalSandbox) -> None:
    """Boot one restored sandbox unless it was killed or paused meanwhile."""
    sid = sandbox.sandbox_id
    try:
        async with sandbox.lock:
            current = host.sandboxes.get(sid) is sandbox
            if current and sandbox.record.state == "running" and sandbox.jail is None:
                await _boot_or_pause(host, sandbox)
    finally:
        host.restoring.pop(sid, asyncio.Event()).set()


async def _boot_or_pause(host: SandboxHost, sandbox: LocalSandbox) -> None:
    record = sandbox.record
    try:
        await sandbox.boot()
    except (JailError, OSError) as exc:
        log.error("sandbox %s could not be restarted: %s", record.sandbox_id, exc)
        with contextlib.suppress(JailError, OSError):
            await sandbox.stop()
        record.state = "paused"
        record.pause_mode = "filesystem"
    host.store.save(record)
    _restored(sandbox)


def _restored(sandbox: LocalSandbox) -> None:
    log.warning(
        "sandbox %s restored (%s); its processes were lost with the old host",
        sandbox.sandbox_id,
        sandbox.record.state,
    )


async def wait_restored(host: SandboxHost, sandbox_id: str) -> None:
    """Return once ``sandbox_id`` is not restoring; 503 after the bounded wait."""
    event = host.restoring.get(sandbox_id)
    if event is None:
        return
    limit = host.settings.sandboxhost_restore_wait_s
    try:
        async with asyncio.timeout(limit):
            await event.wait()
    except TimeoutError:
        raise ControlError(
            503,
            f"sandbox {sandbox_id} is restoring after a host restart; "
            f"not ready within {limit:g}s, retry",
        ) from None


def named_sandbox(request: web.Request) -> str | None:
    """The sandbox a request is for: route id, envd header, or sandbox URL host."""
    sid = request.match_info.get("id") or request.headers.get("E2b-Sandbox-Id")
    if sid:
        return sid
    m = HOST_RE.match(request.headers.get("Host", ""))
    return m.group(2) if m else None


def _authorized(host: SandboxHost, key: str, request: web.Request, sid: str) -> bool:
    """Only a caller entitled to the sandbox is held (others get their 401 now)."""
    if "id" in request.match_info:  # control plane
        given = request.headers.get("X-API-KEY", "")
        return hmac.compare_digest(given.encode(), key.encode())
    token = request.headers.get("X-Access-Token")
    sandbox = host.sandboxes.get(sid)
    if token is None or sandbox is None:
        return True  # proxied traffic: not authenticated by the host itself
    return tokens.accepts(sandbox.record, token, time.time())


async def _held(
    host: SandboxHost, key: str, request: web.Request
) -> web.StreamResponse | None:
    """The 503 if the named sandbox is still restoring after the wait, else None."""
    sid = named_sandbox(request)
    if not sid or sid not in host.restoring:
        return None
    # A kill is not held: it takes the sandbox's lock, so a boot under way
    # finishes first and a boot not yet begun is skipped.
    if request.method == "DELETE" and "id" in request.match_info:
        return None
    if not _authorized(host, key, request, sid):
        # Not held (nor told it is restoring): the control plane answers its
        # 401; a wrong envd token gets envd's 401 here (even on /health).
        return None if "id" in request.match_info else unauthorized()
    try:
        await wait_restored(host, sid)
    except ControlError as exc:
        body = {"code": exc.status, "message": exc.message, "sandboxId": sid}
        return web.json_response(body, status=exc.status)
    return None


def middleware(host: SandboxHost, key: str) -> Middleware:
    """Hold requests for a restoring sandbox until its boot is over."""

    @web.middleware
    async def restoring(request: web.Request, handler: Handler) -> web.StreamResponse:
        if host.restoring:
            held = await _held(host, key, request)
            if held is not None:
                return held
        return await handler(request)

    return restoring
