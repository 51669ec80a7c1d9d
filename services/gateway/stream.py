"""The SSE bridge: replay from a cursor, then live from the hub, with an exact seam.

One connection:
1. take the head ``H`` now (one direct get) and replay ``cursor+1 .. H`` through
   one consumer of its own (``tail``, closed at ``H``), in batched writes;
2. join the hub's feed for the session. ``subscribe`` answers the feed's
   position ``F``: everything after ``F`` will be offered to this client's
   mailbox, everything up to ``F`` was offered before it joined. If ``F > H``
   the client sends ``H+1 .. F`` itself; a new feed starts at ``H`` (``F = H``);
3. live: frames with seq ≤ last sent are dropped; a frame beyond last+1 first
   fills the hole from the log. So every seq goes out once and in order.

A cursor ahead of the head, or a purged range, gets ``event: resync`` first
(with ``id:`` = where the stream resumes), never a silent skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable
from typing import cast

import msgspec
import nats.errors
from aiohttp import web
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from eventstore.errors import EventStoreError, RangeUnavailableError
from eventstore.log import JetStreamLog, StoredEvent
from eventstore.reader import SEQ_HEADER
from schemas.api import Resync
from schemas.names import BusNames
from services.gateway.hub import Hub, Mailbox, sse_frame

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
log = logging.getLogger(__name__)

PING = b": ping\n\n"
# How long a head lookup may retry through a NATS outage before the stream ends.
READ_DEADLINE_S = 15.0
# Replayed events per write (one chunk); the last one of a range is never held.
WRITE_BATCH = 64


class StreamConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Per-connection limits (from GatewaySettings)."""

    ping_s: float = 15.0
    retry_ms: int = 2000
    buffer: int = 1024


class StreamCounters(msgspec.Struct, kw_only=True):
    """Callbacks the metrics module hooks into (kept out of the stream logic)."""

    sent: Callable[[int], None] = lambda n: None
    resync: Callable[[str], None] = lambda reason: None
    opened: Callable[[int], None] = lambda delta: None


class EventStream:
    """Serves ``GET /v1/sessions/{sid}/events``."""

    def __init__(
        self,
        log: JetStreamLog,
        js: JetStreamContext,
        names: BusNames,
        hub: Hub,
        config: StreamConfig,
        counters: StreamCounters | None = None,
    ) -> None:
        self._log = log
        self._js = js
        self._names = names
        self._hub = hub
        self._config = config
        self._counters = counters or StreamCounters()

    async def serve(
        self, request: web.Request, session_id: str, cursor: int, follow: bool
    ) -> web.StreamResponse:
        """Stream the session's events after ``cursor``."""
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        await resp.write(b"retry: %d\n\n" % self._config.retry_ms)
        self._counters.opened(1)
        try:
            last = await self._catch_up(resp, session_id, cursor)
            if follow:
                await self._follow(request, resp, session_id, last)
        except ConnectionError:
            pass  # the client went away (or was cut off as too slow)
        except (nats.errors.Error, TimeoutError, EventStoreError) as exc:
            # Headers are sent: end the stream; the client resumes by cursor.
            log.warning("stream %s ends: %r", session_id, exc)
        finally:
            self._counters.opened(-1)
        return resp

    async def _catch_up(self, resp: web.StreamResponse, sid: str, cursor: int) -> int:
        """Send every event after ``cursor`` up to the head as it is now."""
        target = await self._head(sid)
        last = cursor
        if cursor > target:
            return await self._resync(resp, sid, last, "cursor_ahead", target)
        while last < target:
            try:
                last = await self._send_range(resp, sid, last, target)
            except RangeUnavailableError as exc:
                last = await self._resync(resp, sid, last, exc.reason, target)
        return last

    async def _follow(
        self, request: web.Request, resp: web.StreamResponse, sid: str, last: int
    ) -> None:
        box = Mailbox(self._config.buffer, on_overflow=lambda: _abort(request))
        # The feed has published everything up to ``position`` and offers us
        # everything after it; what lies between our last and it we send here.
        position = self._hub.subscribe(sid, box, last)
        try:
            if position > last:
                last = await self._send_range(resp, sid, last, position)
            await self._live(resp, sid, box, last)
        finally:
            self._hub.unsubscribe(sid, box)

    async def _live(
        self, resp: web.StreamResponse, sid: str, box: Mailbox, last: int
    ) -> None:
        while True:
            frames = await box.take(self._config.ping_s)
            if not frames:
                if box.ended is not None:
                    return  # cut off or shutting down: the client resumes by cursor
                await resp.write(PING)
                continue
            chunks: list[bytes] = []
            for frame in frames:
                if frame.seq <= last:
                    continue
                if frame.seq > last + 1:
                    await self._write(resp, chunks)
                    last = await self._send_range(resp, sid, last, frame.seq - 1)
                chunks.append(frame.data)
                last = frame.seq
            await self._write(resp, chunks)

    async def _send_range(
        self, resp: web.StreamResponse, sid: str, last: int, upto: int
    ) -> int:
        """Send events ``last+1 .. upto`` from one consumer, in batched writes."""
        chunks: list[bytes] = []
        # tail() is an async generator: closing it releases its consumer now.
        tail = cast(AsyncGenerator[StoredEvent, None], self._log.tail(sid, last))
        async with contextlib.aclosing(tail) as events:
            async for stored in events:
                if stored.seq <= last:
                    continue
                chunks.append(sse_frame(stored).data)
                last = stored.seq
                if last >= upto or len(chunks) >= WRITE_BATCH:
                    await self._write(resp, chunks)
                if last >= upto:
                    break
        return last

    async def _head(self, sid: str) -> int:
        deadline = time.monotonic() + READ_DEADLINE_S
        while True:
            try:
                return await self._log.last_seq(sid)
            except (nats.errors.Error, TimeoutError):
                # NATS restarting: the client keeps its connection, we retry.
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def _resync(
        self, resp: web.StreamResponse, sid: str, last: int, reason: str, head: int
    ) -> int:
        """Tell the client its cursor can't be served; go on from what can be."""
        if reason == "cursor_ahead":
            first, resume = (1 if head else 0), head
        else:
            reason, first = "purged", await self._first_available(sid)
            resume = first - 1 if first else head
            if resume <= last:
                # Nothing servable ahead of the cursor: end rather than loop.
                raise RangeUnavailableError(sid, last, first, head, reason)
        body = msgspec.json.encode(
            Resync(reason=reason, first_available=first, last=head, resume_after=resume)
        )
        self._counters.resync(reason)
        await resp.write(b"id: %d\nevent: resync\ndata: %s\n\n" % (resume, body))
        return resume

    async def _first_available(self, sid: str) -> int:
        """The lowest seq of the session JetStream still holds (0 if none)."""
        try:
            msg = await self._js.get_msg(
                self._names.log_stream,
                seq=1,
                subject=self._names.log_session(sid),
                next=True,
                direct=True,
            )
        except NotFoundError:
            return 0
        return int((msg.headers or {})[SEQ_HEADER])

    async def _write(self, resp: web.StreamResponse, chunks: list[bytes]) -> None:
        if chunks:
            await resp.write(b"".join(chunks))
            self._counters.sent(len(chunks))
            chunks.clear()


def _abort(request: web.Request) -> None:
    """Drop a slow client's connection now; its pending write fails and it resumes."""
    transport = request.transport
    if transport is not None:
        transport.abort()
