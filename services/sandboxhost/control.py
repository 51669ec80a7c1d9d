"""The E2B control-plane subset (``X-API-KEY``), current and earlier SDK paths."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from services.sandboxhost.control_paging import ListFilter, json_body, page
from services.sandboxhost.control_snapshots import SnapshotRoutes
from services.sandboxhost.errors import ControlError
from services.sandboxhost.faults import FaultUpdate
from services.sandboxhost.host import ENVD_VERSION, SandboxHost
from services.sandboxhost.tokens import same_secret, token_request

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(status: int, message: str) -> web.Response:
    """E2B's error body."""
    return web.json_response({"code": status, "message": message}, status=status)


class ControlRoutes:
    """aiohttp handlers of the control plane and the admin (fault) API."""

    def __init__(self, host: SandboxHost, api_key: str) -> None:
        self.host = host
        self.api_key = api_key
        self.snapshots = SnapshotRoutes(host)

    def add_to(self, app: web.Application) -> None:
        """Register the routes (both the v2 and the earlier paths)."""
        r = app.router
        for path in ("/v2/sandboxes", "/sandboxes"):
            r.add_post(path, self._auth(self.create))
            r.add_get(path, self._auth(self.list))
        r.add_post("/v2/sandboxes/{id}/connect", self._auth(self.connect))
        r.add_post("/sandboxes/{id}/connect", self._auth(self.connect))
        r.add_post("/sandboxes/{id}/resume", self._auth(self.resume))
        r.add_get("/sandboxes/{id}", self._auth(self.get))
        r.add_delete("/sandboxes/{id}", self._auth(self.kill))
        r.add_post("/sandboxes/{id}/pause", self._auth(self.pause))
        r.add_post("/sandboxes/{id}/timeout", self._auth(self.timeout))
        r.add_post("/sandboxes/{id}/refreshes", self._auth(self.refresh))
        r.add_get("/sandboxes/{id}/metrics", self._auth(self.metrics))
        r.add_get("/admin/faults", self._auth(self.get_faults))
        r.add_post("/admin/faults", self._auth(self.set_faults))
        r.add_delete("/admin/faults", self._auth(self.clear_faults))
        r.add_get("/admin/info", self._auth(self.info))
        self.snapshots.add_to(app, self._auth)

    def _auth(self, handler: Handler) -> Handler:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            key = request.headers.get("X-API-KEY", "")
            if not same_secret(key, self.api_key):
                return error_response(401, "Invalid API key")
            try:
                return await handler(request)
            except ControlError as exc:
                return error_response(exc.status, exc.message)

        return wrapped

    async def create(self, request: web.Request) -> web.StreamResponse:
        """``POST /v2/sandboxes`` (and the earlier ``POST /sandboxes``)."""
        body = await json_body(request)
        key = request.headers.get("Idempotency-Key")
        sandbox = await self.host.create(body, key, token_request(request))
        return web.json_response(self.host.sandbox_json(sandbox), status=201)

    async def connect(self, request: web.Request) -> web.StreamResponse:
        """Connect: 200 if it was running, 201 if it was resumed."""
        body = await json_body(request)
        sandbox, resumed = await self.host.connect(
            request.match_info["id"],
            body.get("timeout"),
            token_request(request),
            memory=body.get("memory", True) is not False,
        )
        return web.json_response(
            self.host.sandbox_json(sandbox), status=201 if resumed else 200
        )

    async def resume(self, request: web.Request) -> web.StreamResponse:
        """Earlier SDKs' ``POST /sandboxes/{id}/resume``: 409 if not paused."""
        body = await json_body(request)
        sandbox = self.host.get(request.match_info["id"])
        if sandbox.record.state != "paused":
            raise ControlError(409, f"sandbox {sandbox.sandbox_id} is already running")
        sandbox, _ = await self.host.connect(
            sandbox.sandbox_id, body.get("timeout"), token_request(request)
        )
        return web.json_response(self.host.sandbox_json(sandbox), status=201)

    async def get(self, request: web.Request) -> web.StreamResponse:
        """``GET /sandboxes/{id}``."""
        await self.host.faults.delay("get")
        sandbox = self.host.get(request.match_info["id"])
        return web.json_response(self.host.detail_json(sandbox))

    async def kill(self, request: web.Request) -> web.StreamResponse:
        """``DELETE /sandboxes/{id}``."""
        await self.host.kill(request.match_info["id"])
        await self.snapshots.ops.collect()
        return web.Response(status=204)

    async def pause(self, request: web.Request) -> web.StreamResponse:
        """``POST /sandboxes/{id}/pause``: 409 if already paused."""
        body = await json_body(request)
        memory = body.get("memory", True) is not False
        await self.host.pause(request.match_info["id"], memory)
        return web.Response(status=204)

    async def timeout(self, request: web.Request) -> web.StreamResponse:
        """``POST /sandboxes/{id}/timeout``."""
        body = await json_body(request)
        await self.host.set_timeout(request.match_info["id"], body.get("timeout"))
        return web.Response(status=204)

    async def refresh(self, request: web.Request) -> web.StreamResponse:
        """Earlier keep-alive: extend the deadline to at least now + duration."""
        body = await json_body(request)
        sandbox = self.host.get(request.match_info["id"])
        duration = int(
            body.get("duration") or self.host.settings.sandboxhost_default_timeout
        )
        sandbox.record.end_at = max(sandbox.record.end_at, time.time() + duration)
        self.host.store.save(sandbox.record)
        return web.Response(status=204)

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        """``GET /sandboxes/{id}/metrics?start=&end=`` (unix seconds)."""
        sandbox = self.host.get(request.match_info["id"])
        start, end = (_unix(request.query.get(k), k) for k in ("start", "end"))
        found = await asyncio.to_thread(self.host.metrics.between, sandbox, start, end)
        return web.json_response([s.json() for s in found])

    async def list(self, request: web.Request) -> web.StreamResponse:
        """``GET /v2/sandboxes`` with ``state``/``metadata`` filters and paging."""
        await self.host.faults.delay("list")
        default = {"running"} if request.path == "/sandboxes" else set()
        flt = ListFilter(request.query, default)
        found = [s for s in self.host.sandboxes.values() if flt.matches(s.record)]
        found.sort(key=lambda s: (s.record.started_at, s.sandbox_id))
        if request.query.get("order") == "desc":
            found.reverse()
        items, headers = page(found, request.query)
        body = [self.host.listed_json(s) for s in items]
        return web.json_response(body, headers=headers)

    async def get_faults(self, request: web.Request) -> web.StreamResponse:
        """Current fault settings."""
        return web.Response(
            body=msgspec.json.encode(self.host.faults), content_type="application/json"
        )

    async def set_faults(self, request: web.Request) -> web.StreamResponse:
        """Merge fault settings (see docs/architecture.md §7)."""
        try:
            update = msgspec.json.decode(await request.read(), type=FaultUpdate)
        except msgspec.DecodeError as exc:
            raise ControlError(400, f"faults: {exc}") from exc
        self.host.faults.apply(update)
        if update.release_restore:  # the AGENTBUS_SANDBOXHOST_RESTORE_HOLD hook
            self.host.restore_gate.set()
        return await self.get_faults(request)

    async def clear_faults(self, request: web.Request) -> web.StreamResponse:
        """Switch every fault off."""
        self.host.faults.apply(FaultUpdate(clear=True))
        self.host.restore_gate.set()
        return await self.get_faults(request)

    async def info(self, request: web.Request) -> web.StreamResponse:
        """What this host really provides (isolation, cgroups, envd version)."""
        return web.json_response(
            {
                "isolation": self.host.spec.isolation,
                "cgroups": self.host.layout.kind,
                "envdVersion": ENVD_VERSION,
                "sandboxes": len(self.host.sandboxes),
                "snapshots": self.host.layers.kind,
                # Still booting after a host restart (services/sandboxhost/restore.py).
                "restoring": sorted(self.host.restoring),
            }
        )


def _unix(raw: str | None, name: str) -> float | None:
    if raw is None or raw == "":
        return None
    try:
        return float(raw)
    except ValueError as exc:
        raise ControlError(400, f"{name}: expected unix seconds, got {raw!r}") from exc
