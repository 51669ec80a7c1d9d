"""OpenAI-compatible chat completions (DeepSeek is one) streamed over aiohttp.

A broken response (retryable status, dropped connection, a stream without
``[DONE]``, an undecodable chunk, a stall) is started over by
:func:`~services.pool.models.stream.retrying`; other 4xx are ``model_rejected``
with the API's own message, an error chunk is ``model_error``. Usage is asked
for (``stream_options.include_usage``) and estimated, marked so, when the
provider sends none. The key is sent as a bearer token and never logged.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from functools import partial
from typing import Any

import aiohttp

from services.pool.errors import ModelError
from services.pool.models.base import (
    Finish,
    Message,
    ModelChunk,
    TextDelta,
    ThoughtDelta,
    ToolRequest,
)
from services.pool.models.http import LazyHttpSession
from services.pool.models.stream import (
    BrokenStream,
    RetryPolicy,
    decode,
    error_message,
    estimate_tokens,
    post_stream,
    retrying,
)


class _Calls:
    """Tool-call fragments joined by index, in the order they appeared."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}

    def add(self, fragment: dict[str, Any]) -> None:
        call = self._calls.setdefault(
            int(fragment.get("index", len(self._calls))),
            {"id": "", "name": "", "arguments": ""},
        )
        call["id"] = fragment.get("id") or call["id"]
        function = fragment.get("function") or {}
        call["name"] += function.get("name") or ""
        call["arguments"] += function.get("arguments") or ""

    def requests(self) -> list[ToolRequest]:
        return [
            ToolRequest(c["id"] or f"call_{i}", c["name"], c["arguments"] or "{}")
            for i, c in sorted(self._calls.items())
        ]


class OpenAIChatModel:
    """A :class:`ModelClient` for ``POST {base_url}/chat/completions``."""

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
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.policy = RetryPolicy(max_retries, retry_base_s, stall_s)
        self.max_tokens = max_tokens
        # Ask for usage in the stream until the provider refuses the option.
        self.ask_usage = True
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session = LazyHttpSession(self.timeout_s)

    def __repr__(self) -> str:
        # The key stays out of reprs (and so out of logs and tracebacks).
        return f"OpenAIChatModel(url={self.url!r}, model={self.model!r})"

    def _http(self) -> aiohttp.ClientSession:
        return self._session.get()

    async def close(self) -> None:
        """Close the HTTP session."""
        await self._session.close()

    def _body(self, messages: list[Message], tools: list[dict[str, Any]]) -> bytes:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        body["stream"] = True
        if self.ask_usage:
            body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = tools
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        return json.dumps(body).encode()

    async def stream(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelChunk]:
        """Stream one completion; a broken one starts over (see the module doc).

        A provider that refuses ``stream_options`` is asked again without it
        (and never again by this client); its usage is then estimated.
        """
        prompt = estimate_tokens(json.dumps(messages))
        while True:
            attempt = partial(self._attempt, self._body(messages, tools), prompt)
            try:
                async for chunk in retrying(attempt, self.policy):
                    yield chunk
                return
            except ModelError as exc:
                if not (self.ask_usage and _refuses_usage_option(exc)):
                    raise
                self.ask_usage = False

    def _attempt(self, body: bytes, prompt: int) -> AsyncGenerator[ModelChunk, None]:
        reader = _Reader(self.model, prompt)
        request = (self.url, body, self._headers)
        return post_stream(self._http(), request, reader, self.policy, self.timeout_s)


def _refuses_usage_option(exc: ModelError) -> bool:
    return exc.code == "model_rejected" and "stream_options" in exc.message


class _Reader:
    """One attempt's chunks → model chunks; ``end`` checks it really ended."""

    def __init__(self, model: str, prompt: int) -> None:
        self.model = model
        self.prompt = prompt
        self.calls = _Calls()
        self.reason = ""
        self.usage: dict[str, Any] = {}
        self.output = 0
        self.done = False

    def feed(self, data: str) -> list[ModelChunk]:
        if data == "[DONE]":
            self.done = True
            return []
        doc = decode(data)
        if not isinstance(doc, dict):
            raise BrokenStream("malformed", f"not a chunk object: {data[:200]}")
        if doc.get("error"):
            raise ModelError("model_error", error_message(data) or "error")
        self.usage = doc.get("usage") or self.usage
        self.model = str(doc.get("model") or self.model)
        out: list[ModelChunk] = []
        for choice in doc.get("choices") or []:
            out += self._delta(choice.get("delta") or {})
            self.reason = choice.get("finish_reason") or self.reason
        return out

    def _delta(self, delta: dict[str, Any]) -> list[ModelChunk]:
        out: list[ModelChunk] = []
        thought, text = delta.get("reasoning_content"), delta.get("content")
        if thought:
            out.append(ThoughtDelta(thought))
        if text:
            out.append(TextDelta(text))
        for fragment in delta.get("tool_calls") or []:
            self.calls.add(fragment)
            self.output += estimate_tokens(json.dumps(fragment))
        self.output += estimate_tokens((thought or "") + (text or ""))
        return out

    def end(self) -> list[ModelChunk]:
        if not self.done:
            raise BrokenStream("truncated", "the stream ended without [DONE]")
        if not self.reason:
            raise BrokenStream("truncated", "the stream ended without a finish reason")
        usage = self.usage
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") or usage.get("prompt_cache_hit_tokens")
        finish = Finish(
            self.reason,
            int(usage.get("prompt_tokens") or self.prompt),
            int(usage.get("completion_tokens") or self.output),
            cached_input_tokens=int(cached or 0),
            estimated=not usage,
            model=self.model,
        )
        return [*self.calls.requests(), finish]
