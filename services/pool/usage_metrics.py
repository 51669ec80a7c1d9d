"""Prometheus counters of model usage by model (the worker process's registry).

``agentbus_model_tokens_total{model,kind}`` counts tokens (``kind``: input,
output, cached — cached is the part of input served from the prompt cache) and
``agentbus_model_seconds_total{model}`` the seconds turns waited on the model.
Counted once per turn, from the ``Usage`` its ``turn.ended`` carries.
"""

from __future__ import annotations

from prometheus_client import Counter

from schemas.events import Usage

TOKENS = Counter(
    "agentbus_model_tokens_total",
    "Model tokens used by turns, by model and kind (input, output, cached).",
    ["model", "kind"],
)
SECONDS = Counter(
    "agentbus_model_seconds_total",
    "Seconds turns waited on the model, by model.",
    ["model"],
)


def turn_ended(model: str, usage: Usage) -> None:
    """Count one finished turn's usage under ``model`` ('unknown' if unnamed)."""
    name = model or "unknown"
    TOKENS.labels(name, "input").inc(usage.input_tokens)
    TOKENS.labels(name, "output").inc(usage.output_tokens)
    TOKENS.labels(name, "cached").inc(usage.cached_input_tokens)
    SECONDS.labels(name).inc(usage.model_s)
