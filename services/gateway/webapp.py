"""The web client at ``/app``: static files from ``app_static/``, no build step.

The page talks to the same origin's API, so the CSP allows nothing else; the
device token stays in the browser's storage and streams use one-use tickets.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

STATIC_DIR = Path(__file__).resolve().parent / "app_static"
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; "
        "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; "
        "base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


async def index(request: web.Request) -> web.FileResponse:
    """``GET /app``: the single page."""
    return web.FileResponse(STATIC_DIR / "index.html", headers=HEADERS)


async def _static_headers(request: web.Request, resp: web.StreamResponse) -> None:
    if request.path.startswith("/app/static/"):
        for name, value in HEADERS.items():
            resp.headers.setdefault(name, value)


def setup_web_app(app: web.Application) -> None:
    """Mount ``/app`` and its assets under ``/app/static/``."""
    app.router.add_get("/app", index, name="app")
    app.router.add_get("/app/", index, name="app_slash")
    app.router.add_static("/app/static", STATIC_DIR, name="app_static")
    app.on_response_prepare.append(_static_headers)
