"""OpenAI-compatible chat completions (DeepSeek is one) streamed over aiohttp.

Retries 429 and 5xx (and a connection that fails before the first chunk) with
exponential backoff, honouring ``Retry-After``; any other failure, or a stream
cut after output was already shown, is a :class:`ModelError` with the API's own
message. The key is sent as a bearer token and never logged.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
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

RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


class _Retry(Exception):
    """Internal: this attempt failed in a way worth retrying."""

    def __init__(self, detail: str, after: float | None = None) -> None:
        self.detail = detail
        self.after = after
        super().__init__(detail)


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
        max_tokens: int | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.retry_base_s = retry_base_s
        self.max_tokens = max_tokens
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        # The key stays out of reprs (and so out of logs and tracebacks).
        return f"OpenAIChatModel(url={self.url!r}, model={self.model!r})"

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=10, sock_read=self.timeout_s
            )
            self._session = aiohttp.ClientSession(timeout=timeout)
        return self._session

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()

    def _body(self, messages: list[Message], tools: list[dict[str, Any]]) -> bytes:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = tools
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        return json.dumps(body).encode()

    async def stream(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelChunk]:
        """Stream one completion; retries only before anything was yielded."""
        body = self._body(messages, tools)
        attempt = 0
        while True:
            yielded = False
            try:
                async for chunk in self._attempt(body):
                    yielded = True
                    yield chunk
                return
            except _Retry as exc:
                if yielded:
                    raise ModelError("stream_interrupted", exc.detail) from exc
                attempt += 1
                if attempt > self.max_retries:
                    raise ModelError("model_unavailable", exc.detail) from exc
                delay = self.retry_base_s * 2 ** (attempt - 1)
                await asyncio.sleep(exc.after if exc.after is not None else delay)

    async def _attempt(self, body: bytes) -> AsyncIterator[ModelChunk]:
        try:
            async with self._http().post(
                self.url, data=body, headers=self._headers
            ) as resp:
                if resp.status != 200:
                    await _raise_for(resp)
                async for chunk in _chunks(resp):
                    yield chunk
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise _Retry(f"connection failed: {exc!r}") from exc
        except TimeoutError as exc:
            raise _Retry(f"no data for {self.timeout_s}s") from exc


async def _raise_for(resp: aiohttp.ClientResponse) -> None:
    text = await resp.text()
    detail = _error_message(text) or f"HTTP {resp.status}"
    if resp.status in RETRYABLE:
        raise _Retry(f"HTTP {resp.status}: {detail}", _retry_after(resp))
    raise ModelError("model_rejected", detail, resp.status)


def _retry_after(resp: aiohttp.ClientResponse) -> float | None:
    value = resp.headers.get("Retry-After")
    try:
        return min(float(value), 60.0) if value else None
    except ValueError:
        return None


def _error_message(text: str) -> str | None:
    try:
        doc = json.loads(text)
    except ValueError:
        return text.strip()[:500] or None
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error) if error else text.strip()[:500]


async def _events(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of ``data:`` lines, until ``[DONE]``."""
    async for raw in resp.content:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise ModelError("bad_chunk", f"undecodable chunk: {data[:200]}") from exc
        if isinstance(doc, dict) and doc.get("error"):
            message = _error_message(data) or "error"
            raise ModelError("model_error", message)
        yield doc
    raise _Retry("the stream ended without [DONE]")


async def _chunks(resp: aiohttp.ClientResponse) -> AsyncIterator[ModelChunk]:
    calls = _Calls()
    reason = "stop"
    usage: dict[str, Any] = {}
    async for doc in _events(resp):
        usage = doc.get("usage") or usage
        for choice in doc.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                yield ThoughtDelta(delta["reasoning_content"])
            if delta.get("content"):
                yield TextDelta(delta["content"])
            for fragment in delta.get("tool_calls") or []:
                calls.add(fragment)
            reason = choice.get("finish_reason") or reason
    for request in calls.requests():
        yield request
    yield Finish(
        reason,
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
    )
