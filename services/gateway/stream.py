"""The SSE bridge: replay from a cursor, then live from the hub, with an exact seam.

One connection:
1. take the head ``H`` now (one direct get) and replay ``cursor+1 .. H`` in
   ``read()`` pages (one page in memory per client, however slow it is);
2. join the hub's feed for the session. ``subscribe`` answers the feed's
   position ``F``: everything after ``F`` will be offered to this client's
   mailbox, everything up to ``F`` was offered before it joined. If ``F > H``
   the client sends ``H+1 .. F`` itself; a new feed starts at ``H`` (``F = H``);
3. frames queued meanwhile: seq ≤ last sent are dropped, a frame beyond
   last+1 first fills the hole from the log; with no hole left the client
   turns *direct*: the feed writes each batch into its socket (``LiveWriter``),
   skipping what the client already has. So every seq goes out once, in order.

A cursor ahead of the head, or a purged range, gets ``event: resync`` first
(with ``id:`` = where the stream resumes), never a silent skip.
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
from services.gateway.hub import Batch, Frame, Hub, Mailbox, sse_bytes

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
log = logging.getLogger(__name__)

PING = b": ping\n\n"
# How long a head lookup may retry through a NATS outage before the stream ends.
READ_DEADLINE_S = 15.0
# Replayed events per write (one HTTP chunk).
WRITE_BATCH = 256


class StreamConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Per-connection limits (from GatewaySettings)."""

    ping_s: float = 15.0
    retry_ms: int = 2000
    buffer: int = 1024
    buffer_bytes: int = 1 << 20
    page: int = 5000


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
            last = await self._catch_up(resp, session_id, cursor, follow)
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

    async def _catch_up(
        self, resp: web.StreamResponse, sid: str, cursor: int, follow: bool
    ) -> int:
        """Send every event after ``cursor`` up to the head as it is now.

        A follower of a session this gateway already feeds catches up to the
        feed's position instead (a seq the log holds, at most a few behind the
        head; the feed offers everything after it): no head lookup, which is
        most of what a joining client costs NATS (many clients, one session).
        """
        position = self._hub.position(sid) if follow else None
        if position is not None and position >= cursor:
            target = position
        else:
            target = await self._head(sid)
        last = cursor
        if cursor > target:
            return await self._resync(resp, sid, last, "cursor_ahead", target)
        while last < target:
            try:
                last = await self._send_range(resp, sid, last, target)
            except RangeUnavailableError as exc:
                head = await self._head(sid)  # the resync names the real head
                last = await self._resync(resp, sid, last, exc.reason, head)
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
            await self._live(request, resp, sid, box, last)
        finally:
            self._hub.unsubscribe(sid, box)

    async def _live(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        sid: str,
        box: Mailbox,
        last: int,
    ) -> None:
        """Close the seam from the queued frames, then let the feed write directly."""
        writer = LiveWriter(request, resp, self._config.buffer_bytes)
        carry: list[Frame] = []
        while True:
            if box.lost:
                box.lost = False
                carry = []  # all at or before the feed's position: refilled next
                position = self._hub.position(sid)
                if position is not None and position > last:
                    last = await self._send_range(resp, sid, last, position)
                continue
            if box.ended is not None:
                return
            carry += box.queued()
            ready, carry, last = in_order(carry, last)
            if not carry:
                # No await from queued() to here: no frame can slip in between.
                writer.write_now(ready, last)
                box.direct = writer
                break
            await self._write(resp, [frame.data for frame in ready])
            last = await self._send_range(resp, sid, last, carry[0].seq - 1)
        while box.ended is None:
            await box.take(self._config.ping_s)  # wakes on end, or to ping
            if box.ended is None and writer.idle_for() >= self._config.ping_s * 0.9:
                writer.ping()

    async def _send_range(
        self, resp: web.StreamResponse, sid: str, last: int, upto: int
    ) -> int:
        """Send events ``last+1 .. upto`` in ``read()`` pages.

        One page in memory per client however slow its socket: a consumer left
        running while a write waits would buffer the whole rest of the range.
        (A small first page for a quicker first event costs more in total: each
        read's consumer runs on past its page until it is unsubscribed.)
        """
        page = self._config.page
        while last < upto:
            events = await self._read(sid, last, min(page, upto - last))
            if not events:
                raise RangeUnavailableError(sid, last, 0, upto, "unreadable")
            for i in range(0, len(events), WRITE_BATCH):
                batch = [e for e in events[i : i + WRITE_BATCH] if e.seq > last]
                await self._write(resp, [sse_bytes(e) for e in batch])
            last = max(last, events[-1].seq)
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


def in_order(frames: list[Frame], last: int) -> tuple[list[Frame], list[Frame], int]:
    """Frames following ``last`` with no hole; the rest (from the hole); new last."""
    ready: list[Frame] = []
    for i, frame in enumerate(frames):
        if frame.seq <= last:
            continue  # already sent (replayed before the seam)
        if frame.seq > last + 1:
            return ready, frames[i:], last
        ready.append(frame)
        last = frame.seq
    return ready, [], last


class LiveWriter:
    """Writes frames straight into a caught-up client's socket, synchronously.

    The response's headers and first chunks went out through aiohttp; HTTP/1.1
    chunk framing is stateless, so whole chunks written here interleave safely.
    A client whose unsent bytes exceed ``max_bytes`` is too slow and is cut.
    The feed may be behind a client that replayed further on its own: frames
    up to ``last`` are skipped here as well.
    """

    def __init__(
        self, request: web.Request, resp: web.StreamResponse, max_bytes: int
    ) -> None:
        transport = request.transport
        if transport is None:
            raise ConnectionResetError("client gone")
        self._transport = transport
        self._chunked = resp.headers.get("Transfer-Encoding") == "chunked"
        self._max_bytes = max_bytes
        self._last_write = time.monotonic()
        self.last = 0  # the last seq this client was sent

    def __call__(self, batch: Batch) -> str | None:
        if batch.last <= self.last:
            return None  # the feed is behind this client: already sent
        if self._transport.is_closing():
            return "gone"
        if self._transport.get_write_buffer_size() > self._max_bytes:
            return "slow_client"
        if batch.first == self.last + 1:
            self._transport.write(batch.chunk if self._chunked else batch.data)
        else:
            # The batch straddles what this client has: send only the rest.
            rest = [f for f in batch.frames if f.seq > self.last]
            if rest[0].seq != self.last + 1:
                return "gap"  # cannot happen with a gap-free feed; resume by cursor
            self.write_now(rest, batch.last)
        self.last = batch.last
        self._last_write = time.monotonic()
        return None

    def write_now(self, frames: list[Frame], last: int) -> None:
        """Write the last frames of the seam at once; ``last`` is then sent."""
        if frames and not self._transport.is_closing():
            attr = "chunk" if self._chunked else "data"
            self._transport.write(b"".join(getattr(f, attr) for f in frames))
            self._last_write = time.monotonic()
        self.last = last

    def ping(self) -> None:
        """A heartbeat comment."""
        if not self._transport.is_closing():
            self._transport.write(
                b"%x\r\n%s\r\n" % (len(PING), PING) if self._chunked else PING
            )
            self._last_write = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since the last write."""
        return time.monotonic() - self._last_write


def _abort(request: web.Request) -> None:
    """Drop a slow client's connection now; its pending write fails and it resumes."""
    transport = request.transport
    if transport is not None:
        transport.abort()
