"""A fake Anthropic Messages server speaking the real streaming wire format.

``POST /v1/messages`` with ``stream: true`` answers ``event:``/``data:`` pairs:
``message_start`` (usage with cache reads and writes), content blocks of
``thinking`` (``thinking_delta``, ``signature_delta``), ``text``
(``text_delta``) and ``tool_use`` (``input_json_delta`` fragments), ``ping``,
``message_delta`` (stop reason, output tokens), ``message_stop``; or an HTTP
error with Anthropic's ``{"type": "error", "error": {...}}`` body; or a broken
stream (cut, truncated, an ``error`` event). Every request body and its headers
are recorded.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Event = tuple[str, dict[str, Any]]


def start(usage: dict[str, int] | None = None) -> Event:
    message = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [],
        "stop_reason": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 1},
    }
    return "message_start", {"type": "message_start", "message": message}


def block(index: int, kind: str, **extra: Any) -> list[Event]:
    """``content_block_start`` of a block (deltas and stop come separately)."""
    body = {"type": kind, **extra}
    return [("content_block_start", {"type": "content_block_start", "index": index,
                                     "content_block": body})]  # fmt: skip


def delta(index: int, **body: Any) -> Event:
    return "content_block_delta", {
        "type": "content_block_delta",
        "index": index,
        "delta": body,
    }


def stop(index: int) -> Event:
    return "content_block_stop", {"type": "content_block_stop", "index": index}


def text_block(index: int, text: str, pieces: int = 3) -> list[Event]:
    size = max(1, -(-len(text) // pieces))
    parts = [text[i : i + size] for i in range(0, len(text), size)]
    out = block(index, "text", text="")
    out += [delta(index, type="text_delta", text=p) for p in parts]
    return [*out, stop(index)]


def thinking_block(index: int, text: str, signature: str) -> list[Event]:
    out = block(index, "thinking", thinking="")
    out += [delta(index, type="thinking_delta", thinking=text)]
    out += [delta(index, type="signature_delta", signature=signature)]
    return [*out, stop(index)]


def tool_block(index: int, tool_id: str, name: str, args: str) -> list[Event]:
    half = len(args) // 2
    out = block(index, "tool_use", id=tool_id, name=name, input={})
    for part in (args[:half], args[half:]):
        out.append(delta(index, type="input_json_delta", partial_json=part))
    return [*out, stop(index)]


def end(reason: str = "end_turn", output: int = 5) -> list[Event]:
    return [
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": reason, "stop_sequence": None},
                           "usage": {"output_tokens": output}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip


@dataclass
class Reply:
    """A streamed answer; ``cut_after`` events then the connection drops,
    ``clean=True`` ends the response properly instead (a silent truncation)."""

    events: list[Event]
    cut_after: int | None = None
    clean: bool = False


@dataclass
class Status:
    status: int
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def text_reply(text: str, usage: dict[str, int] | None = None) -> Reply:
    """A plain answer: message_start, one text block, ping, end."""
    ping: Event = ("ping", {"type": "ping"})
    return Reply([start(usage), ping, *text_block(0, text), *end()])


def overloaded() -> Status:
    error = {"type": "overloaded_error", "message": "Overloaded"}
    return Status(529, {"type": "error", "error": error})


class FakeAnthropic:
    """The server; queue replies with :meth:`push`, read :attr:`requests`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.replies: deque[Reply | Status] = deque()
        self.default: Reply | Status | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    def push(self, *replies: Reply | Status) -> None:
        self.replies.extend(replies)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        item = self.replies.popleft() if self.replies else self.default
        if item is None:
            item = text_reply(f"I see {len(body['messages'])} messages.")
        if isinstance(item, Status):
            return web.json_response(
                item.body, status=item.status, headers=item.headers
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, (name, data) in enumerate(item.events):
            if item.cut_after is not None and i >= item.cut_after:
                if item.clean:
                    break
                assert request.transport is not None
                request.transport.close()
                return resp
            await resp.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        await resp.write_eof()
        return resp
