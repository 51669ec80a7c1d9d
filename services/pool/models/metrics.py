"""Prometheus counters of the model plane (in the worker process's registry).

``agentbus_model_retries_total{cause}`` counts model responses started over and
``agentbus_model_retry_seconds_total{cause}`` the time they lost (the failed
attempt plus the back-off); ``agentbus_model_fallbacks_total{to}`` counts
switches to a fallback model.
"""

from __future__ import annotations

from prometheus_client import Counter

RETRIES = Counter(
    "agentbus_model_retries_total",
    "Model responses started over, by cause.",
    ["cause"],
)
RETRY_SECONDS = Counter(
    "agentbus_model_retry_seconds_total",
    "Seconds lost to broken model responses (failed attempts plus back-off).",
    ["cause"],
)
FALLBACKS = Counter(
    "agentbus_model_fallbacks_total",
    "Turns that continued on a fallback model, by the model switched to.",
    ["to"],
)


def retried(cause: str, lost_s: float) -> None:
    """Count one retry of ``cause`` that lost ``lost_s`` seconds."""
    RETRIES.labels(cause).inc()
    RETRY_SECONDS.labels(cause).inc(lost_s)


def fell_back(to: str) -> None:
    """Count one switch to the fallback model ``to``."""
    FALLBACKS.labels(to).inc()
