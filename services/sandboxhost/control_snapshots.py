"""Control-plane routes of snapshots and forks (E2B wire format)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from services.sandboxhost.control_paging import json_body, page
from services.sandboxhost.errors import ControlError
from services.sandboxhost.forks import Snapshots
from services.sandboxhost.host import SandboxHost
from services.sandboxhost.snapshots import check_name, parse_count, snapshot_json

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Wrap = Callable[[Handler], Handler]


class SnapshotRoutes:
    """``/sandboxes/{id}/snapshots``, ``/snapshots``, ``/templates/{id}``, fork."""

    def __init__(self, host: SandboxHost) -> None:
        self.host = host
        self.ops = Snapshots(host)

    def add_to(self, app: web.Application, auth: Wrap) -> None:
        """Register the routes behind the API-key check ``auth``."""
        r = app.router
        r.add_post("/sandboxes/{id}/snapshots", auth(self.create))
        r.add_get("/snapshots", auth(self.list))
        r.add_delete("/templates/{id}", auth(self.delete))
        r.add_post("/sandboxes/{id}/fork", auth(self.fork))

    async def create(self, request: web.Request) -> web.StreamResponse:
        """201 ``{"snapshotID", "names"}``; memory is never kept (files only)."""
        body = await json_body(request)
        snap = await self.ops.create(
            request.match_info["id"], check_name(body.get("name"))
        )
        return web.json_response(snapshot_json(snap), status=201)

    async def list(self, request: web.Request) -> web.StreamResponse:
        """``GET /snapshots?sandboxID=&name=&limit=&nextToken=``."""
        q = request.query
        found = self.ops.listed(q.get("sandboxID"), q.get("name"))
        items, headers = page(found, q)
        return web.json_response([snapshot_json(s) for s in items], headers=headers)

    async def delete(self, request: web.Request) -> web.StreamResponse:
        """``DELETE /templates/{snapshot id}``: 204, or 404 if unknown."""
        if not await self.ops.delete(request.match_info["id"]):
            raise ControlError(404, f"snapshot {request.match_info['id']} not found")
        return web.Response(status=204)

    async def fork(self, request: web.Request) -> web.StreamResponse:
        """201 ``[{"sandbox": Sandbox} | {"error": Error}]``, one per fork."""
        body = await json_body(request)
        results = await self.ops.fork(
            request.match_info["id"],
            parse_count(body.get("count")),
            body.get("timeout"),
        )
        return web.json_response(results, status=201)
