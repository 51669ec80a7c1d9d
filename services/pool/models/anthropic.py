"""The native Anthropic Messages client (``AGENTBUS_MODEL=anthropic``), streamed.

``POST {base_url}/v1/messages`` with ``stream: true``: text deltas, thinking
blocks (→ :class:`ThoughtDelta`; their signed blocks are sent back with the
tool results they led to, as extended thinking requires), tool use joined from
``input_json_delta`` fragments, prompt caching (breakpoints on the tools, the
system prompt and the conversation so far; cache reads are reported as cached
input tokens). Broken responses are retried like the OpenAI-compatible
client's (:mod:`~services.pool.models.stream`), overloaded/api errors sent as
an ``error`` event included. The key goes in ``x-api-key`` and is never logged.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import aiohttp

from services.pool.models.anthropic_wire import (
    EPHEMERAL,
    Block,
    EventReader,
    mark_cache,
    to_anthropic,
    to_tools,
)
from services.pool.models.base import Message, ModelChunk
from services.pool.models.http import LazyHttpSession
from services.pool.models.stream import (
    RetryPolicy,
    estimate_tokens,
    post_stream,
    retrying,
)

API_VERSION = "2023-06-01"
DEFAULT_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 8192
KEEP_THINKING = 64


class AnthropicModel:
    """A :class:`ModelClient` for the Anthropic Messages API."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        *,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        retry_base_s: float = 0.5,
        stall_s: float = 60.0,
        max_tokens: int | None = None,
        thinking_budget: int = 0,
        prompt_cache: bool = True,
    ) -> None:
        self.url = base_url.rstrip("/") + "/v1/messages"
        self.model = model
        self.timeout_s = timeout_s
        self.policy = RetryPolicy(max_retries, retry_base_s, stall_s)
        self.max_tokens = max_tokens or DEFAULT_MAX_TOKENS
        self.thinking_budget = thinking_budget
        self.prompt_cache = prompt_cache
        self._headers = {
            "Content-Type": "application/json",
            "anthropic-version": API_VERSION,
        }
        if api_key:
            self._headers["x-api-key"] = api_key
        self._session = LazyHttpSession(self.timeout_s)
        # Signed thinking blocks by the first tool-use id of their response.
        self._thinking: OrderedDict[str, list[Block]] = OrderedDict()

    def __repr__(self) -> str:
        return f"AnthropicModel(url={self.url!r}, model={self.model!r})"

    def _http(self) -> aiohttp.ClientSession:
        return self._session.get()

    async def close(self) -> None:
        """Close the HTTP session."""
        await self._session.close()

    def body(self, messages: list[Message], tools: list[dict[str, Any]]) -> bytes:
        """The request body (public for tests of the wire format)."""
        system, turns = to_anthropic(messages)
        self._with_thinking(turns)
        specs = to_tools(tools)
        doc: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": turns,
            "stream": True,
        }
        if self.prompt_cache:
            mark_cache(turns, specs)
        if system:
            block: Block = {"type": "text", "text": system}
            if self.prompt_cache:
                block["cache_control"] = EPHEMERAL
            doc["system"] = [block]
        if specs:
            doc["tools"] = specs
        if self.thinking_budget:
            doc["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        return json.dumps(doc).encode()

    def _with_thinking(self, turns: list[Block]) -> None:
        for turn in turns:
            uses = [b for b in turn["content"] if b.get("type") == "tool_use"]
            if turn["role"] == "assistant" and uses:
                kept = self._thinking.get(str(uses[0].get("id")))
                if kept:
                    turn["content"][:0] = [dict(b) for b in kept]

    def stream(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelChunk]:
        """Stream one message; a broken one starts over (see the module doc)."""
        body = self.body(messages, tools)
        prompt = estimate_tokens(json.dumps(messages))
        return retrying(lambda: self._attempt(body, prompt), self.policy)

    def _attempt(self, body: bytes, prompt: int) -> AsyncGenerator[ModelChunk, None]:
        reader = _ThinkingKept(self.model, prompt, self._keep_thinking)
        request = (self.url, body, self._headers)
        return post_stream(self._http(), request, reader, self.policy, self.timeout_s)

    def _keep_thinking(self, reader: EventReader) -> None:
        if reader.thinking and reader.tools:
            first = reader.tools[min(reader.tools)]["id"]
            self._thinking[first] = reader.thinking
            while len(self._thinking) > KEEP_THINKING:
                self._thinking.popitem(last=False)


class _ThinkingKept(EventReader):
    """An attempt's reader that hands its thinking on once the message ended
    (before the end chunks go out: a consumer may stop at the last one)."""

    def __init__(
        self, model: str, prompt: int, keep: Callable[[EventReader], None]
    ) -> None:
        super().__init__(model, prompt)
        self._keep = keep

    def end(self) -> list[ModelChunk]:
        chunks = super().end()
        self._keep(self)
        return chunks
