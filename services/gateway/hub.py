"""Per-process fan-out: one JetStream tail per followed session, many SSE clients.

A ``Feed`` runs ``JetStreamLog.tail`` for one session while at least one client
follows it and offers each event, pre-formatted once, to every client's bounded
``Mailbox``. A client whose mailbox is full is cut off at once (it resumes by
cursor): a slow phone never stalls the feed, other clients, or memory. The last
client to leave stops the feed and so releases its consumer.

Seam rule (see ``stream.py``): ``subscribe`` answers the feed's position; the
client sends what lies between its cursor and that position itself, drops every
frame with seq ≤ its last sent one, and fills any hole from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import nats.errors

from eventstore.errors import EventStoreError, RangeUnavailableError
from eventstore.log import JetStreamLog, StoredEvent

log = logging.getLogger(__name__)


class Frame(NamedTuple):
    """One SSE event, encoded once for every client (also as an HTTP/1.1 chunk)."""

    seq: int
    data: bytes
    chunk: bytes


def sse_bytes(stored: StoredEvent) -> bytes:
    """``id:`` = seq, ``event:`` = type, ``data:`` = the stored bytes unchanged."""
    raw = stored.raw
    if b"\n" in raw:  # msgspec JSON has none; keep SSE framing safe all the same
        raw = raw.replace(b"\n", b"\ndata: ")
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (stored.seq, stored.type.encode(), raw)


def sse_frame(stored: StoredEvent) -> Frame:
    """The event's SSE bytes, also as one HTTP/1.1 chunk (for direct writes)."""
    text = sse_bytes(stored)
    return Frame(stored.seq, text, b"%x\r\n%s\r\n" % (len(text), text))


class Batch(NamedTuple):
    """Consecutive frames the feed offers at once (one write per client)."""

    first: int
    last: int
    frames: tuple[Frame, ...]
    data: bytes
    chunk: bytes


def batch_of(frames: list[Frame]) -> Batch:
    """Frames (consecutive seqs) as one batch, encoded once."""
    if len(frames) == 1:
        one = frames[0]
        return Batch(one.seq, one.seq, (one,), one.data, one.chunk)
    data = b"".join(f.data for f in frames)
    chunk = b"%x\r\n%s\r\n" % (len(data), data)
    return Batch(frames[0].seq, frames[-1].seq, tuple(frames), data, chunk)


# Writes a batch to a caught-up client at once; answers why it could not (or None).
DirectWrite = Callable[[Batch], str | None]


class Mailbox:
    """A client's bounded queue of frames; ``ended`` says why it will get no more.

    A client past the seam switches to ``direct``: the feed then writes each
    frame straight into its socket, with no task switch per client per event;
    a socket that cannot keep up is cut. Before that, a full queue is dropped
    and flagged ``lost`` (the client refills from the log, which is the truth).
    """

    def __init__(
        self, limit: int, on_overflow: Callable[[], None] | None = None
    ) -> None:
        self.limit = max(1, limit)
        self.ended: str | None = None
        self.direct: DirectWrite | None = None
        # Frames were dropped while queuing: fill from the log up to the feed.
        self.lost = False
        self._items: deque[Frame] = deque()
        self._ready = asyncio.Event()
        self._on_overflow = on_overflow

    def offer(self, batch: Batch) -> bool:
        """Queue (or write) a batch; False, and the mailbox ends, if it can't."""
        if self.ended is not None:
            return False
        if self.direct is not None:
            problem = self.direct(batch)
            if problem is None:
                return True
            self._overflow(problem)
            return False
        if len(self._items) + len(batch.frames) > self.limit:
            # Still closing its seam: drop the queue (memory stays bounded) and
            # let the client take what it missed from the log.
            self._items.clear()
            self.lost = True
            self._ready.set()
            return True
        self._items.extend(batch.frames)
        self._ready.set()
        return True

    def _overflow(self, reason: str) -> None:
        self.end(reason)
        if reason == "slow_client" and self._on_overflow is not None:
            self._on_overflow()

    def end(self, reason: str) -> None:
        """No more frames will come (feed failed, gateway stopping, too slow)."""
        if self.ended is None:
            self.ended = reason
        self._ready.set()

    def queued(self) -> list[Frame]:
        """Take every queued frame now."""
        frames = list(self._items)
        self._items.clear()
        self._ready.clear()
        return frames

    async def take(self, idle_s: float) -> list[Frame]:
        """Every queued frame; [] after ``idle_s`` of silence or once ended."""
        if not self._items and self.ended is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(idle_s):
                    await self._ready.wait()
        return self.queued()


class Feed:
    """The one tail of a session in this process."""

    def __init__(self, session_id: str, after: int) -> None:
        self.session_id = session_id
        self.after = after
        self.mailboxes: set[Mailbox] = set()
        self.task: asyncio.Task[None] | None = None

    def publish(self, batch: Batch) -> int:
        """Offer a batch to every client; returns how many were cut off as too slow."""
        self.after = batch.last
        cut = [box for box in self.mailboxes if not box.offer(batch)]
        self.mailboxes.difference_update(cut)
        return sum(1 for box in cut if box.ended == "slow_client")


async def retire(task: asyncio.Task[None], every_s: float = 0.5) -> None:
    """Cancel ``task`` until it is done.

    One cancel can be lost on Python 3.11 when it races a ``wait_for`` timeout
    inside the tail's watchdog; a feed that outlived its clients would hold its
    JetStream consumer for ever.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=every_s)


class Hub:
    """Session id → Feed; started by the first subscriber, stopped by the last."""

    def __init__(
        self,
        log_: JetStreamLog,
        *,
        on_slow: Callable[[int], None] | None = None,
        retry_s: float = 0.2,
    ) -> None:
        self._log = log_
        self._feeds: dict[str, Feed] = {}
        self._reapers: set[asyncio.Task[None]] = set()
        self._on_slow = on_slow
        self._retry_s = retry_s

    @property
    def feeds(self) -> int:
        """Sessions followed by this process (= JetStream consumers held)."""
        return len(self._feeds)

    def subscribe(self, session_id: str, box: Mailbox, after: int) -> int:
        """Follow a session; returns the feed's position: every event after it
        will be offered to ``box``. A new feed starts after ``after``.
        """
        feed = self._feeds.get(session_id)
        if feed is None:
            feed = self._feeds[session_id] = Feed(session_id, after)
            feed.task = asyncio.create_task(self._run(feed), name=f"feed {session_id}")
        feed.mailboxes.add(box)
        return feed.after

    def position(self, session_id: str) -> int | None:
        """The last seq the session's feed has offered (None: not followed)."""
        feed = self._feeds.get(session_id)
        return None if feed is None else feed.after

    def unsubscribe(self, session_id: str, box: Mailbox) -> None:
        """Leave; the last client out stops the feed (its consumer goes at once)."""
        feed = self._feeds.get(session_id)
        if feed is None:
            return
        feed.mailboxes.discard(box)
        if not feed.mailboxes:
            del self._feeds[session_id]
            if feed.task is not None:
                reaper = asyncio.create_task(retire(feed.task))
                self._reapers.add(reaper)
                reaper.add_done_callback(self._reapers.discard)

    async def close(self) -> None:
        """End every client's stream and stop every feed."""
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            for box in feed.mailboxes:
                box.end("shutdown")
        tasks = [feed.task for feed in feeds if feed.task is not None]
        await asyncio.gather(*(retire(t) for t in tasks), *self._reapers)

    async def _run(self, feed: Feed) -> None:
        """Publish what the pump received, all that arrived since the last time
        as one batch: under load, batches grow and writes per event shrink;
        idle, each event goes out alone at once.
        """
        backlog: deque[StoredEvent] = deque()
        arrived = asyncio.Event()
        pump = asyncio.create_task(self._pump(feed, backlog, arrived))
        pump.add_done_callback(lambda _: arrived.set())
        try:
            while not pump.done() or backlog:
                await arrived.wait()
                arrived.clear()
                if not backlog:
                    continue
                frames = [sse_frame(stored) for stored in backlog]
                backlog.clear()
                cut = feed.publish(batch_of(frames))
                if cut and self._on_slow is not None:
                    self._on_slow(cut)
        finally:
            pump.cancel()
            # Shielded: a repeated cancel of this task must not leave the pump
            # (and its JetStream consumer) running.
            await asyncio.shield(retire(pump))

    async def _pump(
        self, feed: Feed, backlog: deque[StoredEvent], arrived: asyncio.Event
    ) -> None:
        after = feed.after
        while True:
            try:
                async for stored in self._log.tail(feed.session_id, after):
                    after = stored.seq
                    backlog.append(stored)
                    arrived.set()
            except RangeUnavailableError as exc:
                # The log changed under us (purged, re-created): clients resume by
                # cursor and get a resync; this feed cannot go on.
                log.warning("feed %s ends: %s", feed.session_id, exc)
                self._fail(feed, "range_unavailable")
                return
            except (nats.errors.Error, TimeoutError, EventStoreError) as exc:
                log.warning("feed %s retries after %r", feed.session_id, exc)
                await asyncio.sleep(self._retry_s)

    def _fail(self, feed: Feed, reason: str) -> None:
        for box in list(feed.mailboxes):
            box.end(reason)
        if self._feeds.get(feed.session_id) is feed:
            del self._feeds[feed.session_id]
