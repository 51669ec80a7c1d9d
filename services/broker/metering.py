"""Sandbox usage: the machine's :class:`Meter` actions as ``sandbox.usage`` events.

The pure machine (``machine._metered``) notices every move between billed states
(running, paused, archived) and the seconds spent in the one left; this module
turns that into the session-log event and counts it for Prometheus
(``agentbus_sandbox_seconds_total{state}``, in the broker's default registry).
"""

from __future__ import annotations

from typing import cast

from prometheus_client import Counter

from schemas.events import BilledState, SandboxUsage
from services.broker.machine_io import Meter

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
