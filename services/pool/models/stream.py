"""What every HTTP streaming model client shares: SSE reading, errors, retries.

A response is *broken* when the request fails with a retryable status (408,
409, 429, 5xx, 529), the connection drops, the stream ends without its end
marker (``[DONE]``, ``message_stop``), a chunk is undecodable, or no event
arrives for ``stall_s`` seconds. :func:`retrying` starts a broken response over
with exponential backoff (``Retry-After`` honoured) as long as no tool call of
that response was handed out; before each retry it yields :class:`Retrying`,
whose ``discard`` tells the consumer to withdraw what the attempt streamed.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from services.pool.errors import ModelError
from services.pool.models.base import ModelChunk, Retrying, ToolRequest

RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
MAX_DELAY_S = 60.0


class BrokenStream(Exception):
    """This attempt failed in a way worth retrying; ``cause`` is a short label."""

    def __init__(self, cause: str, detail: str, after: float | None = None) -> None:
        self.cause = cause
        self.detail = detail
        self.after = after
        super().__init__(f"{cause}: {detail}")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a broken response is started over."""

    max_retries: int = 4
    base_s: float = 0.5
    stall_s: float = 60.0

    def delay(self, attempt: int, after: float | None) -> float:
        """``Retry-After`` if given, else exponential backoff with jitter."""
        if after is not None:
            return min(after, MAX_DELAY_S)
        jitter = 1.0 + random.uniform(0.0, 0.25)  # noqa: S311 (not security)
        backoff: float = self.base_s * 2 ** (attempt - 1) * jitter
        return min(backoff, MAX_DELAY_S)


Attempt = Callable[[], AsyncGenerator[ModelChunk, None]]


async def retrying(attempt: Attempt, policy: RetryPolicy) -> AsyncIterator[ModelChunk]:
    """Run ``attempt`` until it completes, retrying broken ones (see module doc)."""
    number = 0
    while True:
        number += 1
        started = time.monotonic()
        shown = tool = False
        try:
            async with aclosing(attempt()) as chunks:
                async for chunk in chunks:
                    shown = True
                    tool = tool or isinstance(chunk, ToolRequest)
                    yield chunk
            return
        except BrokenStream as exc:
            if tool:
                raise ModelError("stream_interrupted", exc.detail) from exc
            if number > policy.max_retries:
                raise ModelError("model_unavailable", str(exc)) from exc
            delay = policy.delay(number, exc.after)
            lost = time.monotonic() - started + delay
            yield Retrying(number, exc.cause, delay, lost, shown)
            await asyncio.sleep(delay)


async def sse(
    resp: aiohttp.ClientResponse, stall_s: float, first_s: float | None = None
) -> AsyncIterator[tuple[str, str]]:
    """``(event, data)`` of each SSE event; a silence of ``stall_s`` is broken.

    The first event may take ``first_s`` (a model may think before it streams);
    comment lines (keep-alives) do not count as events; the consumer's own time
    between events does not count either.
    """
    event, data = "", []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(stall_s, first_s or 0.0)
    while raw := await _line(resp, deadline, stall_s):
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line and data:
            yield event, "\n".join(data)
            event, data = "", []
            deadline = loop.time() + stall_s
    if data:  # a last event without its blank line
        yield event, "\n".join(data)


async def _line(resp: aiohttp.ClientResponse, deadline: float, stall_s: float) -> bytes:
    try:
        async with asyncio.timeout_at(deadline):
            return await resp.content.readline()
    except TimeoutError as exc:
        raise BrokenStream("stall", f"no event in time ({stall_s}s between)") from exc
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
        raise BrokenStream("disconnect", f"connection lost: {exc!r}") from exc


def decode(data: str) -> object:
    """One chunk's JSON; an undecodable chunk breaks the stream."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise BrokenStream("malformed", f"undecodable chunk: {data[:200]}") from exc


async def raise_for(resp: aiohttp.ClientResponse) -> None:
    """A non-200 answer: retryable → :class:`BrokenStream`, else ``model_rejected``."""
    text = await resp.text()
    detail = error_message(text) or f"HTTP {resp.status}"
    if resp.status in RETRYABLE:
        after = retry_after(resp)
        raise BrokenStream(
            f"http_{resp.status}", f"HTTP {resp.status}: {detail}", after
        )
    raise ModelError("model_rejected", detail, resp.status)


def retry_after(resp: aiohttp.ClientResponse) -> float | None:
    """``retry-after-ms`` or ``Retry-After`` (seconds), if present and numeric."""
    for name, scale in (("retry-after-ms", 0.001), ("Retry-After", 1.0)):
        value = resp.headers.get(name)
        try:
            if value:
                return min(float(value) * scale, MAX_DELAY_S)
        except ValueError:
            continue
    return None


def error_message(text: str) -> str | None:
    """The API's own message from an error body (OpenAI and Anthropic shapes)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text.strip()[:500] or None
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error) if error else text.strip()[:500]


class StreamReader(Protocol):
    """A provider's SSE events → model chunks, for one attempt."""

    done: bool

    def feed(self, data: str) -> list[ModelChunk]: ...

    def end(self) -> list[ModelChunk]:
        """The last chunks; raises :class:`BrokenStream` if it never really ended."""
        ...


async def post_stream(
    http: aiohttp.ClientSession,
    request: tuple[str, bytes, dict[str, str]],
    reader: StreamReader,
    policy: RetryPolicy,
    timeout_s: float,
) -> AsyncGenerator[ModelChunk, None]:
    """One attempt: POST ``(url, body, headers)``, the SSE data through ``reader``.

    A failed request or dropped connection is a broken attempt, as is silence
    past ``timeout_s``; :func:`retrying` decides what happens next.
    """
    url, body, headers = request
    try:
        async with http.post(url, data=body, headers=headers) as resp:
            if resp.status != 200:
                await raise_for(resp)
            async for _, data in sse(resp, policy.stall_s, timeout_s):
                for chunk in reader.feed(data):
                    yield chunk
                if reader.done:
                    break
            for chunk in reader.end():
                yield chunk
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
        raise connection_broken(exc) from exc
    except TimeoutError as exc:
        raise BrokenStream("stall", f"no answer for {timeout_s}s") from exc


def connection_broken(exc: BaseException) -> BrokenStream:
    """A failure of the request itself (connect, reset) as a broken attempt."""
    return BrokenStream("connect", f"connection failed: {exc!r}")


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token) for usage the provider omitted."""
    return (len(text) + 3) // 4
