"""Prometheus metrics of one gateway process (its own registry: no globals)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from services.gateway.stream import StreamCounters

__all__ = ["CONTENT_TYPE_LATEST", "GatewayMetrics"]


class GatewayMetrics:
    """Request counts and latency, SSE clients, events sent, resyncs, slow cuts."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "agentbus_gateway_requests",
            "HTTP requests answered",
            ["method", "route", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "agentbus_gateway_request_seconds",
            "Time to answer (SSE: time to headers)",
            ["route"],
            registry=r,
        )
        self.sse_clients = Gauge(
            "agentbus_gateway_sse_clients", "Open event streams", registry=r
        )
        self.sse_events = Counter(
            "agentbus_gateway_sse_events", "Events written to SSE clients", registry=r
        )
        self.resyncs = Counter(
            "agentbus_gateway_sse_resyncs", "resync events sent", ["reason"], registry=r
        )
        self.slow_cuts = Counter(
            "agentbus_gateway_sse_slow_disconnects",
            "Clients cut off because their buffer filled",
            registry=r,
        )
        self.header_timeouts = Counter(
            "agentbus_gateway_header_timeouts",
            "Connections dropped for not sending a request head in time",
            registry=r,
        )
        self.feeds = Gauge(
            "agentbus_gateway_feeds",
            "Sessions followed (JetStream consumers)",
            registry=r,
        )

    def stream_counters(self) -> StreamCounters:
        """Hooks for the SSE bridge."""
        return StreamCounters(
            sent=self.sse_events.inc,
            resync=lambda reason: self.resyncs.labels(reason).inc(),
            opened=self.sse_clients.inc,
        )

    def track_feeds(self, count: Callable[[], int]) -> None:
        """Report the hub's feed count at scrape time."""
        self.feeds.set_function(count)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
