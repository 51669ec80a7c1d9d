"""Replay and follow one session's events from a cursor, with no gap and no repeat.

Each run locates event ``cursor + 1`` by its seq's subject (O(1)), then streams with
an ordered push consumer filtered to the session. Every delivered event carries
its per-session seq, so duplicates after a consumer reset are dropped and a gap
re-locates from the cursor. Ranges JetStream no longer holds come from the
projector over request/reply.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import NamedTuple

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from eventstore.errors import RangeUnavailableError
from schemas.names import BusNames

SEQ_HEADER = "Agentbus-Seq"
TYPE_HEADER = "Agentbus-Type"
# How long a live follower waits in silence before checking the connection.
WATCHDOG_S = 0.5


class Item(NamedTuple):
    """One event on its way out: per-session seq, type, exact bytes."""

    seq: int
    type: str
    raw: bytes


class ProjectorRange(msgspec.Struct, frozen=True):
    """Reply of the projector to a range read."""

    events: list[msgspec.Raw] = []
    last: int = 0
    error: str | None = None


class _SeqType(msgspec.Struct, frozen=True):
    seq: int
    type: str


class ProjectorRead(msgspec.Struct, frozen=True):
    """Request to the projector: events of a session after a seq."""

    session_id: str
    after: int
    limit: int = 1000


_RANGE = msgspec.json.Decoder(ProjectorRange)
_SEQTYPE = msgspec.json.Decoder(_SeqType)
_ENC = msgspec.json.Encoder()


class _Restart(Exception):
    """Internal: re-create the consumer from the cursor."""


class Replayer:
    """Streams events of a session, from JetStream or, for old ranges, the projector."""

    def __init__(
        self, nc: Client, names: BusNames, projector_timeout: float = 5.0
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._names = names
        self._projector_timeout = projector_timeout

    async def replay(
        self, session_id: str, after: int, upto: int | None
    ) -> AsyncIterator[Item]:
        """Events ``after+1 ..`` up to ``upto`` or to the end as it is now."""
        async for item in self._stream(session_id, after, upto, catch_up=True):
            yield item

    async def follow(self, session_id: str, after: int) -> AsyncIterator[Item]:
        """Events after ``after``, forever."""
        async for item in self._stream(session_id, after, None, catch_up=False):
            yield item

    async def _stream(
        self, session_id: str, after: int, upto: int | None, *, catch_up: bool
    ) -> AsyncIterator[Item]:
        cursor = after
        while upto is None or cursor < upto:
            start = await self._locate(session_id, cursor)
            if start is None:
                async for item in self._from_projector(session_id, cursor, upto):
                    cursor = item.seq
                    yield item
                continue
            if catch_up and start < 0:
                return  # nothing after the cursor yet
            try:
                async for item in self._consume(
                    session_id, cursor, abs(start), upto, catch_up
                ):
                    cursor = item.seq
                    yield item
            except _Restart:
                continue
            if catch_up:
                return

    async def _locate(self, session_id: str, cursor: int) -> int | None:
        """Stream seq to start from for event ``cursor+1``; None if purged from JS.

        Exact-seq lookups only (O(1)): event cursor+1 if stored; else, if event
        ``cursor`` is stored (or cursor is 0 and the session has nothing), we are
        caught up and follow from just after it.
        """
        found = await self._get(session_id, cursor + 1)
        if found is not None:
            return found
        # Caught up is answered negative: start there to follow, stop to replay.
        if cursor == 0:
            return -1 if await self._first(session_id) is None else None
        at_cursor = await self._get(session_id, cursor)
        if at_cursor is not None:
            return -(at_cursor + 1)
        first = await self._first(session_id)
        if first is not None and first > cursor:
            return None  # cursor+1 existed and was purged: the projector has it
        raise RangeUnavailableError(session_id, cursor, first or 0, 0, "cursor_ahead")

    async def _get(self, session_id: str, seq: int) -> int | None:
        try:
            msg = await self._js.get_msg(
                self._names.log_stream,
                subject=self._names.log_seq(session_id, seq),
                direct=True,
            )
        except NotFoundError:
            return None
        return msg.seq or 0

    async def _first(self, session_id: str) -> int | None:
        """Per-session seq of the session's first event still in JetStream."""
        try:
            msg = await self._js.get_msg(
                self._names.log_stream,
                seq=1,
                next=True,
                subject=self._names.log_session(session_id),
                direct=True,
            )
        except NotFoundError:
            return None
        return int((msg.headers or {})[SEQ_HEADER])

    async def _consume(
        self, session_id: str, cursor: int, start: int, upto: int | None, catch_up: bool
    ) -> AsyncIterator[Item]:
        queue: asyncio.Queue[Msg] = asyncio.Queue()

        async def deliver(msg: Msg) -> None:
            queue.put_nowait(msg)

        reconnects = self._nc.stats["reconnects"]
        sub = await self._js.subscribe(
            self._names.log_session(session_id),
            cb=deliver,
            ordered_consumer=True,
            idle_heartbeat=1.0,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start
            ),
        )
        try:
            while upto is None or cursor < upto:
                msg = await self._next(queue, reconnects)
                item = _item(msg)
                if item.seq <= cursor:
                    continue  # redelivered after a consumer reset
                if item.seq != cursor + 1:
                    raise _Restart  # a gap: locate again from the cursor
                cursor = item.seq
                yield item
                if catch_up and msg.metadata.num_pending == 0:
                    return  # replayed everything that existed when we started
        finally:
            with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
                await sub.unsubscribe()

    async def _next(self, queue: asyncio.Queue[Msg], reconnects: int) -> Msg:
        while True:
            try:
                return queue.get_nowait()
            except asyncio.QueueEmpty:
                pass
            try:
                return await asyncio.wait_for(queue.get(), WATCHDOG_S)
            except TimeoutError:
                if self._nc.stats["reconnects"] != reconnects:
                    raise _Restart from None  # server restarted: don't wait ~20 s

    async def _from_projector(
        self, session_id: str, cursor: int, upto: int | None
    ) -> AsyncIterator[Item]:
        request = ProjectorRead(session_id=session_id, after=cursor, limit=1000)
        try:
            reply = await self._nc.request(
                self._names.projector_read,
                _ENC.encode(request),
                timeout=self._projector_timeout,
            )
            page = _RANGE.decode(reply.data)
        except (TimeoutError, nats.errors.Error, msgspec.DecodeError) as exc:
            raise RangeUnavailableError(
                session_id, cursor, 0, 0, f"purged from JetStream; projector: {exc!r}"
            ) from exc
        items = [_raw_item(raw) for raw in page.events]
        if page.error or not items or items[0].seq != cursor + 1:
            raise RangeUnavailableError(
                session_id, cursor, 0, page.last, page.error or "purged everywhere"
            )
        for item in items:
            if upto is not None and item.seq > upto:
                return
            if item.seq != cursor + 1:
                return  # let the caller locate again
            cursor = item.seq
            yield item


def _item(msg: Msg) -> Item:
    hdrs = msg.headers or {}
    return Item(int(hdrs[SEQ_HEADER]), hdrs[TYPE_HEADER], msg.data)


def _raw_item(raw: msgspec.Raw) -> Item:
    data = bytes(raw)
    head = _SEQTYPE.decode(data)
    return Item(head.seq, head.type, data)
