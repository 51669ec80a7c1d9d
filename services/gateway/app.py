"""The aiohttp application: routes from the contract table, errors, auth, metrics."""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
import nats.errors
from aiohttp import web
from aiohttp.typedefs import Handler

from eventstore.errors import AppendFailedError, RangeUnavailableError
from schemas.api import ErrorBody, ErrorDetail
from services.gateway.auth import RateLimiter
from services.gateway.contract import BY_NAME, ROUTES
from services.gateway.endpoints import Endpoints
from services.gateway.errors import GatewayError, UnavailableError
from services.gateway.files import FILE_DEPS, FileDeps, setup_file_routes
from services.gateway.metrics import GatewayMetrics
from services.gateway.tickets import authenticate_request

log = logging.getLogger(__name__)

# HTTP errors aiohttp raises itself (no route, wrong method), in api.md's shape.
HTTP_CODES = {
    404: ("not_found", "no such route"),
    405: ("method_not_allowed", "method not allowed on this route"),
    413: ("too_large", "request body too large"),
}


def error_response(exc: GatewayError) -> web.Response:
    """An api.md error answer (identical bytes for identical errors)."""
    return web.Response(
        body=msgspec.json.encode(exc.body()),
        status=exc.status,
        content_type="application/json",
        headers=exc.headers,
    )


def _http_error(exc: web.HTTPException) -> web.Response:
    code, message = HTTP_CODES.get(exc.status, ("http_error", exc.reason))
    body = ErrorBody(error=ErrorDetail(code=code, message=message))
    headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
    return web.Response(
        body=msgspec.json.encode(body),
        status=exc.status,
        content_type="application/json",
        headers=headers,
    )


def build_app(
    endpoints: Endpoints,
    secret: bytes,
    limiter: RateLimiter,
    metrics: GatewayMetrics,
    client_max_size: int,
    files: FileDeps | None = None,
) -> web.Application:
    """Wire every route of ``contract.ROUTES`` to its handler."""

    @web.middleware
    async def edge(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        name = request.match_info.route.name or "unmatched"
        status = 500
        try:
            resp = await _guarded(request, handler, name, secret, limiter)
            status = resp.status
            return resp
        finally:
            metrics.requests.labels(request.method, name, str(status)).inc()
            metrics.latency.labels(name).observe(time.monotonic() - started)

    app = web.Application(middlewares=[edge], client_max_size=client_max_size)
    for route in ROUTES:
        if route.kind in {"file_get", "file_put"}:
            continue  # mounted by setup_file_routes below
        app.router.add_route(
            route.method, route.path, getattr(endpoints, route.name), name=route.name
        )
    if files is not None:
        app[FILE_DEPS] = files
        setup_file_routes(app)  # GET/PUT /v1/sessions/{sid}/files/{path}
    return app


async def _guarded(
    request: web.Request,
    handler: Handler,
    name: str,
    secret: bytes,
    limiter: RateLimiter,
) -> web.StreamResponse:
    try:
        route = BY_NAME.get(name)
        if route is not None and route.auth:  # (file routes are in the table too)
            device = await authenticate_request(request, secret)  # header or ?ticket=
            limiter.check(device)
            request["device"] = device
        return await handler(request)
    except GatewayError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        return _http_error(exc)
    except (
        nats.errors.Error,
        TimeoutError,
        AppendFailedError,
        RangeUnavailableError,
    ) as exc:
        log.warning("%s %s: dependency failed: %r", request.method, request.path, exc)
        return error_response(UnavailableError())
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        body = ErrorBody(error=ErrorDetail(code="internal", message="internal error"))
        return web.Response(
            body=msgspec.json.encode(body), status=500, content_type="application/json"
        )
