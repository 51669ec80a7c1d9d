"""envd data-plane routing: sandbox by ``E2b-Sandbox-Id``, per-sandbox token, user."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from services.sandboxhost import envd_files, envd_fs, envd_process, tokens
from services.sandboxhost.connect import dumps, rpc_user, unary_error
from services.sandboxhost.errors import ControlError, EnvdError
from services.sandboxhost.host import SandboxHost
from services.sandboxhost.sandbox import LocalSandbox

USERS = frozenset({"user", "root"})
Unary = Callable[[web.Request, LocalSandbox], Awaitable[dict[str, Any]]]
Stream = Callable[[web.Request, LocalSandbox], Awaitable[web.StreamResponse]]

UNARY: dict[str, Unary] = {
    "process.Process/List": envd_process.list_processes,
    "process.Process/SendInput": envd_process.send_input,
    "process.Process/SendSignal": envd_process.send_signal,
    "process.Process/CloseStdin": envd_process.close_stdin,
    "process.Process/Update": envd_process.update,
    "filesystem.Filesystem/Stat": envd_fs.stat,
    "filesystem.Filesystem/ListDir": envd_fs.list_dir,
    "filesystem.Filesystem/MakeDir": envd_fs.make_dir,
    "filesystem.Filesystem/Move": envd_fs.move,
    "filesystem.Filesystem/Remove": envd_fs.remove,
    "filesystem.Filesystem/CreateWatcher": envd_fs.create_watcher,
    "filesystem.Filesystem/GetWatcherEvents": envd_fs.get_watcher_events,
    "filesystem.Filesystem/RemoveWatcher": envd_fs.remove_watcher,
}
STREAM: dict[str, Stream] = {
    "process.Process/Start": envd_process.start,
    "process.Process/Connect": envd_process.connect,
    "process.Process/StreamInput": envd_process.stream_input,
    "filesystem.Filesystem/WatchDir": envd_fs.watch_dir,
}


EXPIRED = "signature is already expired"
UNAUTHORIZED = (
    "unauthorized access, please provide a valid access token "
    "or method signing if supported"
)


def unauthorized(message: str | None = None) -> web.Response:
    """envd's 401 (plain JSON with an integer code)."""
    return web.json_response(
        {"code": 401, "message": message or UNAUTHORIZED}, status=401
    )


def not_running(sandbox_id: str, why: str) -> web.Response:
    """What the edge proxy answers for a sandbox that is not running."""
    return web.json_response(
        {"code": 502, "message": f"The sandbox {sandbox_id} was not found ({why})"},
        status=502,
    )


def signature_error(request: web.Request, token: str, op: str) -> str | None:
    """Why a signed ``/files`` URL (download_url/upload_url) is refused, or None."""
    sig = request.query.get("signature", "")
    if not sig:
        return "missing signature"
    path = request.query.get("path", "")
    user = request.query.get("username", "")
    raw = f"{path}:{op}:{user}:{token}"
    expiration = request.query.get("signature_expiration")
    if expiration:
        if not expiration.isdigit():
            return "invalid signature expiration"
        raw += f":{expiration}"
    digest = hashlib.sha256(raw.encode()).digest()
    want = "v1_" + base64.b64encode(digest).decode().rstrip("=")
    if not hmac.compare_digest(sig, want):
        return "invalid signature"
    if expiration and int(expiration) < time.time():
        return EXPIRED  # envd's words
    return None


def signature_ok(request: web.Request, token: str, op: str) -> bool:
    """Check a signed ``/files`` URL (download_url/upload_url)."""
    return signature_error(request, token, op) is None


class EnvdRoutes:
    """aiohttp handlers of the envd protocol for every sandbox of the host."""

    def __init__(self, host: SandboxHost) -> None:
        self.host = host

    def add_to(self, app: web.Application) -> None:
        """Register the routes."""
        app.router.add_get("/health", self.health)
        app.router.add_get("/files", self.files)
        app.router.add_post("/files", self.files)
        app.router.add_post(
            "/{service:process\\.Process|filesystem\\.Filesystem}/{method}", self.rpc
        )

    async def health(self, request: web.Request) -> web.StreamResponse:
        """204 while the addressed sandbox runs (or for the host itself)."""
        sid = request.headers.get("E2b-Sandbox-Id")
        if sid:
            sandbox = self.host.sandboxes.get(sid)
            if sandbox is None:
                return not_running(sid, "unknown or killed")
            if sandbox.record.state != "running":
                return not_running(sid, "paused")
        return web.Response(status=204, headers={"Cache-Control": "no-store"})

    async def _route(
        self, request: web.Request, op: str | None
    ) -> LocalSandbox | web.Response:
        """The sandbox to serve, or the error response (auth, routing, state)."""
        sid = request.headers.get("E2b-Sandbox-Id", "")
        sandbox = self.host.sandboxes.get(sid)
        if sandbox is None and not sid and op is not None:
            sandbox = self._signed_by(request, op)
            if sandbox is None:
                return unauthorized()
            sid = sandbox.sandbox_id
        if sandbox is None:
            return not_running(sid or "(no E2b-Sandbox-Id)", "unknown or killed")
        if not self._authorized(request, sandbox, op):
            return unauthorized(self._signature_reason(request, sandbox, op))
        swapped = self.host.faults.swap.get(sid)
        if swapped:
            target = self.host.sandboxes.get(swapped)
            if target is None:
                return not_running(sid, "swapped to a missing sandbox")
            sandbox = target
        if sandbox.record.state != "running":
            return await self._auto_resume(sandbox)
        return sandbox

    @staticmethod
    def _authorized(
        request: web.Request, sandbox: LocalSandbox, op: str | None
    ) -> bool:
        """The sandbox's live token, a rotated one in its grace, or a signed URL."""
        token = request.headers.get("X-Access-Token")
        now = time.time()
        if token is not None:
            return tokens.accepts(sandbox.record, token, now)
        if op is None or not tokens.current_valid(sandbox.record, now):
            return False
        return signature_ok(request, sandbox.record.envd_access_token, op)

    async def _auto_resume(self, sandbox: LocalSandbox) -> LocalSandbox | web.Response:
        """Resume a paused sandbox on traffic if it was created with autoResume."""
        sid = sandbox.sandbox_id
        if not sandbox.record.auto_resume:
            return not_running(sid, "paused")
        try:
            resumed, _ = await self.host.connect(sid, None)
        except ControlError as exc:
            return not_running(sid, f"paused; auto-resume failed: {exc.message}")
        return resumed

    def _signed_by(self, request: web.Request, op: str) -> LocalSandbox | None:
        """A signed URL carries no sandbox id: the signature's key identifies it.

        An expired signature still names its sandbox, so the answer can say why
        it is refused (envd's "signature is already expired").
        """
        if "signature" not in request.query:
            return None
        for sandbox in self.host.sandboxes.values():
            if not tokens.current_valid(sandbox.record, time.time()):
                continue
            error = signature_error(request, sandbox.record.envd_access_token, op)
            if error is None or error == EXPIRED:
                return sandbox
        return None

    @staticmethod
    def _signature_reason(
        request: web.Request, sandbox: LocalSandbox, op: str | None
    ) -> str | None:
        """envd's message for an expired signed URL (None: the generic one)."""
        if op is None or "X-Access-Token" in request.headers:
            return None
        error = signature_error(request, sandbox.record.envd_access_token, op)
        return error if error == EXPIRED else None

    async def files(self, request: web.Request) -> web.StreamResponse:
        """``/files`` download/upload."""
        op = "read" if request.method == "GET" else "write"
        routed = await self._route(request, op)
        if isinstance(routed, web.Response):
            return routed
        user = request.query.get("username")
        if user is not None and user not in USERS:
            return envd_files.plain_error(401, f"user '{user}' not found")
        await self.host.faults.delay("envd")
        if request.method == "GET":
            return await envd_files.download(request, routed)
        return await envd_files.upload(request, routed)

    async def rpc(self, request: web.Request) -> web.StreamResponse:
        """A Connect RPC of the Process or Filesystem service."""
        name = f"{request.match_info['service']}/{request.match_info['method']}"
        routed = await self._route(request, None)
        if isinstance(routed, web.Response):
            return routed
        user = rpc_user(request)
        if user is not None and user not in USERS:
            return unary_error(
                EnvdError("unauthenticated", f"invalid username: '{user}'")
            )
        await self.host.faults.delay("envd")
        if name in STREAM:
            return await STREAM[name](request, routed)
        handler = UNARY.get(name)
        if handler is None:
            return unary_error(EnvdError("unimplemented", f"{name} is not implemented"))
        try:
            result = await handler(request, routed)
        except EnvdError as exc:
            return unary_error(exc)
        return web.Response(body=dumps(result), content_type="application/json")
