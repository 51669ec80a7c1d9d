"""What every model client streams: text, reasoning, whole tool calls, a finish."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import msgspec

Message = dict[str, Any]


class TextDelta(msgspec.Struct, frozen=True):
    """A piece of the answer."""

    text: str


class ThoughtDelta(msgspec.Struct, frozen=True):
    """A piece of the reasoning."""

    text: str


class ToolRequest(msgspec.Struct, frozen=True):
    """One complete tool call (fragments already joined); ``arguments`` is JSON."""

    call_id: str
    name: str
    arguments: str


class Finish(msgspec.Struct, frozen=True):
    """The response ended: why, and the tokens it cost.

    ``cached_input_tokens`` is the part of ``input_tokens`` read from the
    provider's prompt cache; ``estimated`` marks counts the client estimated
    because the provider sent none; ``model`` names the model that answered.
    """

    reason: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    estimated: bool = False
    model: str = ""


class Retrying(msgspec.Struct, frozen=True):
    """An attempt failed and the response starts over after ``delay_s``.

    ``discard`` says the failed attempt had already streamed output, which the
    consumer must withdraw; ``lost_s`` is the failed attempt's time plus the delay.
    """

    attempt: int
    cause: str
    delay_s: float
    lost_s: float
    discard: bool


ModelChunk = TextDelta | ThoughtDelta | ToolRequest | Finish | Retrying


class ModelClient(Protocol):
    """One streamed chat completion per call; cancelling the iterator stops it."""

    def stream(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelChunk]:
        """Stream one response to ``messages`` with ``tools`` on offer."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
