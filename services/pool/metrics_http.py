"""``GET /metrics`` of the pool: the Prometheus counters of all its workers.

The model plane's counters (``services.pool.models.metrics``) are incremented
in the worker processes, so the pool runs prometheus_client's multiprocess
mode: ``agentbus pool`` (its ``main``) exports ``PROMETHEUS_MULTIPROC_DIR`` =
``pool_metrics_dir`` (else a temporary directory it removes at exit) to the
workers it starts, which write their values there, and this endpoint serves
their sum. Off unless ``pool_metrics_port`` is set.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from services.common.metrics_http import serve_registry
from services.pool.settings import PoolSettings

ENV = "PROMETHEUS_MULTIPROC_DIR"


async def serve_metrics(settings: PoolSettings, stack: AsyncExitStack) -> str | None:
    """Start the endpoint if configured (before any worker); its URL, or None."""
    if settings.pool_metrics_port is None:
        return None
    path = settings.pool_metrics_dir
    if path is None:
        raise ValueError("pool_metrics_port needs pool_metrics_dir (main sets it)")
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    host, port = settings.pool_metrics_host, settings.pool_metrics_port
    return await serve_registry(registry, host, port, stack)
