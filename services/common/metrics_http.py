"""``GET /metrics`` on its own port: one Prometheus registry served over HTTP.

The broker serves the process's default registry, the pool the multiprocess sum
of its workers; both start the same small aiohttp site, closed with ``stack``.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


async def serve_registry(
    registry: CollectorRegistry, host: str, port: int, stack: AsyncExitStack
) -> str:
    """Serve ``registry`` at ``http://host:port/metrics`` until ``stack`` closes."""

    async def metrics(_: web.Request) -> web.Response:
        headers = {"Content-Type": CONTENT_TYPE_LATEST}
        return web.Response(body=generate_latest(registry), headers=headers)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    await web.TCPSite(runner, host, port).start()
    return f"http://{host}:{port}/metrics"
