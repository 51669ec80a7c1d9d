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
    """The response ended: why, and the tokens it cost."""

    reason: str
    input_tokens: int = 0
    output_tokens: int = 0


ModelChunk = TextDelta | ThoughtDelta | ToolRequest | Finish


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
