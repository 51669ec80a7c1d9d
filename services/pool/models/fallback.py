"""Fallback models (``AGENTBUS_MODEL_FALLBACKS``): the turn goes on on the next.

Each model but the last gets ``after`` attempts per response (its retries);
when they all fail (``model_unavailable``), the response starts over on the
next model of the list, a :class:`Retrying` with cause ``fallback`` withdrawing
what the failed attempt streamed. The switch sticks: later responses of this
client (the worker's session) go to the model that answered. A response that
already handed out a tool call, or that a model rejected (4xx), does not fall
back: those failures are not the provider's availability.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from services.pool.errors import ModelError
from services.pool.models import metrics
from services.pool.models.base import (
    Message,
    ModelChunk,
    ModelClient,
    Retrying,
    TextDelta,
    ThoughtDelta,
)


class FallbackModel:
    """A :class:`ModelClient` over an ordered list of ``(label, client)``."""

    def __init__(self, models: list[tuple[str, ModelClient]], after: int) -> None:
        if not models:
            raise ValueError("FallbackModel needs at least one model")
        self.models = models
        self.after = after
        self.current = 0

    def __repr__(self) -> str:
        labels = [label for label, _ in self.models]
        return f"FallbackModel({labels!r}, current={self.current})"

    async def stream(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelChunk]:
        """Stream from the current model; fall back when it stays unavailable."""
        while True:
            started = time.monotonic()
            shown = False
            try:
                async for chunk in self.models[self.current][1].stream(messages, tools):
                    if isinstance(chunk, TextDelta | ThoughtDelta):
                        shown = True
                    elif isinstance(chunk, Retrying):
                        shown, started = False, time.monotonic()
                    yield chunk
                return
            except ModelError as exc:
                last = self.current + 1 >= len(self.models)
                if exc.code != "model_unavailable" or last:
                    raise
            self.current += 1
            label = self.models[self.current][0]
            metrics.fell_back(label)
            lost = time.monotonic() - started
            yield Retrying(self.after, "fallback", 0.0, lost, shown)

    async def close(self) -> None:
        """Close every model's client."""
        for _, client in self.models:
            await client.close()
