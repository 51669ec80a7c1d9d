"""Sandbox usage: the machine's :class:`Meter` actions as ``sandbox.usage`` events.

The pure machine (``machine._metered``) notices every move between billed states
(running, paused, archived) and the seconds spent in the one left; this module
turns that into the session-log event and counts it for Prometheus
(``agentbus_sandbox_seconds_total{state}``), served on ``GET /metrics`` when
``broker_metrics_port`` is set.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import cast

from prometheus_client import REGISTRY, Counter

from schemas.events import BilledState, SandboxUsage
from services.broker.machine_io import Meter
from services.broker.settings import BrokerSettings
from services.common.metrics_http import serve_registry

SANDBOX_SECONDS = Counter(
    "agentbus_sandbox_seconds_total",
    "Seconds sandboxes spent in each billed state (counted when they leave it).",
    ["state"],
)
TRANSITIONS = Counter(
    "agentbus_sandbox_billed_transitions_total",
    "Moves between billed sandbox states, by the state entered ('none': unbilled).",
    ["state"],
)


def usage_event(meter: Meter) -> SandboxUsage:
    """The ``sandbox.usage`` payload of one meter reading (and count it)."""
    if meter.state is not None:
        SANDBOX_SECONDS.labels(meter.state).inc(meter.seconds)
    TRANSITIONS.labels(meter.next_state or "none").inc()
    return SandboxUsage(
        state=cast(BilledState | None, meter.state),
        seconds=meter.seconds,
        next_state=cast(BilledState | None, meter.next_state),
        archive_bytes=meter.archive_bytes,
        at=meter.at,
    )


async def serve_metrics(settings: BrokerSettings, stack: AsyncExitStack) -> str | None:
    """Start ``GET /metrics`` if ``broker_metrics_port`` is set; its URL, or None."""
    if settings.broker_metrics_port is None:
        return None
    host, port = settings.broker_metrics_host, settings.broker_metrics_port
    return await serve_registry(REGISTRY, host, port, stack)
