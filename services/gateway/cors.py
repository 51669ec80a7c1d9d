"""CORS for configured origins (``AGENTBUS_GATEWAY_CORS_ORIGINS``), preflight included.

Headers are added when a response is prepared, so streamed answers (SSE, file
downloads) get them too. Tokens travel in ``Authorization``, never in cookies,
so no ``Allow-Credentials``.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

ALLOW_METHODS = "GET, POST, PUT, DELETE, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, Last-Event-ID"
EXPOSE_HEADERS = "Retry-After, Content-Length, Content-Disposition"
MAX_AGE_S = "600"


def parse_origins(raw: str) -> frozenset[str]:
    """``"https://a, https://b"`` → the set of allowed origins (``*``: any)."""
    return frozenset(o.strip().rstrip("/") for o in raw.split(",") if o.strip())


class Cors:
    """Answers preflights and marks answers for allowed origins."""

    def __init__(self, origins: frozenset[str]) -> None:
        self._origins = origins

    def allowed(self, origin: str | None) -> bool:
        """Whether a browser page from ``origin`` may read our answers."""
        return origin is not None and ("*" in self._origins or origin in self._origins)

    @web.middleware
    async def preflight(
        self, request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        """``OPTIONS`` with ``Access-Control-Request-Method`` from an allowed origin."""
        origin = request.headers.get("Origin")
        if (
            request.method == "OPTIONS"
            and "Access-Control-Request-Method" in request.headers
            and self.allowed(origin)
        ):
            return web.Response(
                status=204,
                headers={
                    "Access-Control-Allow-Methods": ALLOW_METHODS,
                    "Access-Control-Allow-Headers": ALLOW_HEADERS,
                    "Access-Control-Max-Age": MAX_AGE_S,
                },
            )
        return await handler(request)

    async def on_prepare(self, request: web.Request, resp: web.StreamResponse) -> None:
        """Add the CORS headers to any answer to an allowed origin."""
        resp.headers.add("Vary", "Origin")
        origin = request.headers.get("Origin")
        if origin is not None and self.allowed(origin):
            resp.headers["Access-Control-Allow-Origin"] = origin
            resp.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS


def setup_cors(app: web.Application, origins: str) -> None:
    """Enable CORS for ``origins`` (comma-separated); nothing when empty."""
    allowed = parse_origins(origins)
    if not allowed:
        return
    cors = Cors(allowed)
    app.middlewares.insert(0, cors.preflight)
    app.on_response_prepare.append(cors.on_prepare)
