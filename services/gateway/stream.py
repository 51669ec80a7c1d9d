"""The SSE bridge: replay from a cursor, then live from the hub, with an exact seam.

One connection:
1. replay ``read()`` pages from the cursor until a page comes back short
   (caught up with the head as it was then);
2. join the hub's feed (a new feed starts after this client's last seq);
3. replay once more from the last seq — this closes the window between step 1
   and step 2, since the feed carries every event after the position it had
   when we joined and that position is ≤ the head this read sees;
4. live: frames with seq ≤ last are dropped; a frame beyond last+1 first
   fills the hole from ``read()``. So every seq goes out once and in order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

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
# How long a read may retry through a NATS outage before the stream ends.
READ_DEADLINE_S = 15.0


class StreamConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Per-connection limits (from GatewaySettings)."""

    ping_s: float = 15.0
    retry_ms: int = 2000
    buffer: int = 1024
    page: int = 500


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
            if follow:
                await self._follow(request, resp, session_id, cursor)
            else:
                await self._replay(resp, session_id, cursor, None)
        except ConnectionError:
            pass  # the client went away (or was cut off as too slow)
        except (nats.errors.Error, TimeoutError, EventStoreError) as exc:
            # Headers are sent: end the stream; the client resumes by cursor.
            log.warning("stream %s ends: %r", session_id, exc)
        finally:
            self._counters.opened(-1)
        return resp

    async def _follow(
        self, request: web.Request, resp: web.StreamResponse, sid: str, cursor: int
    ) -> None:
        last = await self._replay(resp, sid, cursor, None)
        box = Mailbox(self._config.buffer, on_overflow=lambda: _abort(request))
        self._hub.subscribe(sid, box, last)
        try:
            last = await self._replay(resp, sid, last, None)
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
                    last = await self._replay(resp, sid, last, frame.seq - 1)
                    if frame.seq <= last:
                        continue
                chunks.append(frame.data)
                last = frame.seq
            await self._write(resp, chunks)

    async def _replay(
        self, resp: web.StreamResponse, sid: str, last: int, upto: int | None
    ) -> int:
        """Send events after ``last`` (up to ``upto``, or until caught up); new last."""
        page = self._config.page
        while upto is None or last < upto:
            limit = page if upto is None else min(page, upto - last)
            try:
                events = await self._read(sid, last, limit)
            except RangeUnavailableError as exc:
                last = await self._resync(resp, sid, last, exc)
                continue
            if events:
                await self._write(resp, [sse_frame(e).data for e in events])
                last = events[-1].seq
            if len(events) < limit:
                break
        return last

    async def _read(self, sid: str, after: int, limit: int) -> list[StoredEvent]:
        deadline = time.monotonic() + READ_DEADLINE_S
        while True:
            try:
                return await self._log.read(sid, after, limit)
            except (nats.errors.Error, TimeoutError):
                # NATS restarting: the client keeps its connection, we retry.
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def _resync(
        self, resp: web.StreamResponse, sid: str, last: int, exc: RangeUnavailableError
    ) -> int:
        """Tell the client its cursor can't be served; go on from what can be."""
        head = await self._log.last_seq(sid)
        if exc.reason == "cursor_ahead":
            reason, first, resume = "cursor_ahead", (1 if head else 0), head
        else:
            reason, first = "purged", await self._first_available(sid)
            resume = first - 1 if first else head
        if resume <= last and reason != "cursor_ahead":
            raise exc  # nothing servable ahead: end the stream rather than loop
        body = msgspec.json.encode(
            Resync(reason=reason, first_available=first, last=head, resume_after=resume)
        )
        self._counters.resync(reason)
        frame = b"id: %d\nevent: resync\ndata: %s\n\n" % (resume, body)
        await resp.write(frame)
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
