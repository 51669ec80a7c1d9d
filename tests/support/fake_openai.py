"""A fake OpenAI-compatible chat completions server speaking the real wire format.

``POST /v1/chat/completions`` with ``stream: true`` answers Server-Sent Events of
``chat.completion.chunk`` objects (content deltas, ``reasoning_content``,
tool-call argument fragments by index, a usage chunk, ``data: [DONE]``), or the
HTTP errors real APIs send (``{"error": {...}}`` bodies, ``Retry-After``), or a
broken stream: a connection cut mid-stream, a clean end without ``[DONE]``, an
undecodable chunk (a ``str`` in ``chunks`` is sent as is), a stall. Every
request body is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk``."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def text_chunks(
    text: str, pieces: int = 4, key: str = "content"
) -> list[dict[str, Any]]:
    """``text`` split over several deltas (the first also carries the role)."""
    size = max(1, -(-len(text) // pieces))
    parts = [text[i : i + size] for i in range(0, len(text), size)]
    out = [chunk({"role": "assistant", key: parts[0]})]
    out += [chunk({key: part}) for part in parts[1:]]
    return out


def tool_chunks(
    index: int, call_id: str, name: str, args: str, pieces: int = 3
) -> list[dict[str, Any]]:
    """One tool call whose JSON arguments arrive in fragments."""
    size = max(1, -(-len(args) // pieces))
    frags = [args[i : i + size] for i in range(0, len(args), size)]
    first = {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }
    out = [chunk({"tool_calls": [first]})]
    out += [
        chunk({"tool_calls": [{"index": index, "function": {"arguments": f}}]})
        for f in frags
    ]
    return out


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    """The final usage chunk (``stream_options.include_usage``): no choices."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "fake-model",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


@dataclass
class Stream:
    """A 200 streamed answer; ``cut_after`` chunks then the connection drops.

    ``done=False`` leaves out ``[DONE]`` and drops the connection, or with
    ``clean=True`` ends the response properly (a silent truncation);
    ``stall_after`` chunks then nothing more is sent until the client leaves.
    """

    chunks: list[dict[str, Any] | str]
    cut_after: int | None = None
    done: bool = True
    clean: bool = False
    stall_after: int | None = None
    # A pause before the first chunk (a model thinking before it streams).
    first_delay_s: float = 0.0


@dataclass
class Status:
    """An HTTP error answer."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def answer(text: str, finish: str = "stop", usage: tuple[int, int] = (10, 5)) -> Stream:
    """A plain streamed text answer with usage."""
    return Stream([*text_chunks(text), chunk({}, finish), usage_chunk(*usage)])


class FakeOpenAI:
    """The server; queue answers with :meth:`push`, read :attr:`requests`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.answers: deque[Stream | Status] = deque()
        self.default: Stream | Status | None = None
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self.url = ""

    def push(self, *answers: Stream | Status) -> None:
        self.answers.extend(answers)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        item = self.answers.popleft() if self.answers else self.default
        if item is None:
            item = answer(f"I see {len(body['messages'])} messages.")
        if isinstance(item, Status):
            return web.json_response(
                item.body, status=item.status, headers=item.headers
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(item.first_delay_s)
        for i, doc in enumerate(item.chunks):
            if item.stall_after is not None and i >= item.stall_after:
                await self._stall()
                return resp
            if item.cut_after is not None and i >= item.cut_after:
                return self._cut(request, resp)
            data = doc if isinstance(doc, str) else json.dumps(doc)
            await resp.write(f"data: {data}\n\n".encode())
        if item.done:
            await resp.write(b"data: [DONE]\n\n")
        elif not item.clean:
            return self._cut(request, resp)
        await resp.write_eof()
        return resp

    async def _stall(self) -> None:
        """Send nothing until the server stops (the client gives up first)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), 30)

    @staticmethod
    def _cut(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        return resp
