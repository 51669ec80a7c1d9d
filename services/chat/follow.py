"""Follow a session's SSE stream, resuming by ``Last-Event-ID`` after any drop.

Events are handed on in seq order, each once: a replay that overlaps what was
already delivered is filtered by seq.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

Event = dict[str, Any]
MAX_BACKOFF_S = 5.0


class StreamDenied(Exception):
    """The gateway refused the stream (401/404): retrying cannot help."""

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"the gateway answered {status}")


class Follower:
    """Delivers a session's events to ``on_event``; ``last`` is the cursor."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        url: str,
        on_event: Callable[[Event], Awaitable[None]],
        on_state: Callable[[str], None],
    ) -> None:
        self._http = http
        self._url = url
        self._on_event = on_event
        self._on_state = on_state
        self.last = 0

    async def run(self) -> None:
        """Follow forever: reconnect with back-off; raise StreamDenied on 401/404."""
        delay = 0.25
        while True:
            try:
                await self._once()
                delay = 0.25
            except (aiohttp.ClientError, TimeoutError, ConnectionError):
                pass
            self._on_state("reconnecting")
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)

    async def _once(self) -> None:
        headers = {"Last-Event-ID": str(self.last)}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=45)
        async with self._http.get(self._url, headers=headers, timeout=timeout) as r:
            if r.status in (401, 404):
                raise StreamDenied(r.status)
            r.raise_for_status()
            self._on_state("live")
            await self._read(r)

    async def _read(self, resp: aiohttp.ClientResponse) -> None:
        event_name, data = "message", list[str]()
        async for raw in resp.content:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line == "":
                if data:
                    await self._dispatch(event_name, "\n".join(data))
                event_name, data = "message", []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif line.startswith("event:"):
                event_name = line[6:].strip()

    async def _dispatch(self, name: str, data: str) -> None:
        body = json.loads(data)
        if name == "resync":
            self.last = max(self.last, int(body.get("resume_after", self.last)))
            return
        seq = body.get("seq")
        if isinstance(seq, int) and seq > self.last:
            self.last = seq
            await self._on_event(body)
