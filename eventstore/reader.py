"""Replay and follow one session's events from a cursor, with no gap and no repeat.

Each run locates event ``cursor + 1`` by its seq's subject (O(1)), then streams with
a lean push consumer filtered to the session (``push.py``). Every event carries
its per-session seq, so duplicates after a consumer reset are dropped and a gap
re-locates from the cursor. Ranges JetStream no longer holds come from the
projector over request/reply.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from eventstore.deadletter import (
    DEAD_LETTERS,
    SEQ_HEADER,
    TYPE_HEADER,
    LogDeadLetter,
    problem,
    subject_seq,
)
from eventstore.errors import RangeUnavailableError
from eventstore.projector_wire import (
    RANGE_DECODER,
    SEQTYPE_DECODER,
    ProjectorRange,
    ProjectorRead,
)
from eventstore.push import PushConsumer, Watch
from eventstore.push import Restart as _Restart
from schemas.codec import decode_event
from schemas.events import Event
from schemas.names import BusNames

__all__ = [
    "SEQ_HEADER",
    "TYPE_HEADER",
    "ProjectorRange",
    "ProjectorRead",
    "Replayer",
    "StoredEvent",
    "stored",
]
# Pause between a follower's attempts while NATS is restarting.
RETRY_S = 0.05
# ``_locate``: JetStream holds no event of the session.
JS_EMPTY = 0
# A cursor past any session's end (asks the projector for its last seq only).
_BEYOND = 2**53


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One event as stored: its seq and type (from headers) and its exact bytes."""

    seq: int
    type: str
    raw: bytes

    def event(self) -> Event:
        """Decode the envelope and its typed payload."""
        return decode_event(self.raw)


_ENC = msgspec.json.Encoder()


class Replayer:
    """Streams events of a session, from JetStream or, for old ranges, the projector."""

    def __init__(
        self, nc: Client, names: BusNames, projector_timeout: float = 5.0
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._names = names
        self._projector_timeout = projector_timeout
        self._js_timeout = 5.0
        self._watch = Watch(nc)

    @property
    def nc(self) -> Client:
        """The connection reads go over."""
        return self._nc

    @property
    def names(self) -> BusNames:
        """The bus names of this deployment."""
        return self._names

    async def replay(
        self, session_id: str, after: int, upto: int | None
    ) -> AsyncIterator[StoredEvent]:
        """Events ``after+1 ..`` up to ``upto`` or to the end as it is now."""
        async for batch in self.replay_batches(session_id, after, upto):
            for item in batch:
                yield item

    async def replay_batches(
        self, session_id: str, after: int, upto: int | None
    ) -> AsyncIterator[list[StoredEvent]]:
        """As :meth:`replay`, in lists of consecutive events (fewer hand-offs)."""
        async for batch in self._stream(session_id, after, upto, catch_up=True):
            yield batch

    async def follow(self, session_id: str, after: int) -> AsyncIterator[StoredEvent]:
        """Events after ``after``, forever."""
        async for batch in self._stream(session_id, after, None, catch_up=False):
            for item in batch:
                yield item

    async def _stream(
        self, session_id: str, after: int, upto: int | None, *, catch_up: bool
    ) -> AsyncIterator[list[StoredEvent]]:
        """Batches of consecutive events; each leg's batches go on from the cursor."""
        cursor = after
        while upto is None or cursor < upto:
            try:
                async with contextlib.aclosing(
                    self._leg(session_id, cursor, upto, catch_up)
                ) as leg:
                    async for batch in leg:
                        cursor = batch[-1].seq
                        yield batch
            except _Restart:
                continue
            except (TimeoutError, nats.errors.Error) as exc:
                if catch_up or not _transient(exc):
                    raise
                await self._pause()  # NATS restarting: a follower waits it out
                continue
            if catch_up:
                return

    async def _leg(
        self, session_id: str, cursor: int, upto: int | None, catch_up: bool
    ) -> AsyncGenerator[list[StoredEvent], None]:
        """Events from one source (projector page, or one consumer) after ``cursor``."""
        start = await self.locate(session_id, cursor)
        if start is None or start == JS_EMPTY:
            page = [
                item
                async for item in self._from_projector(
                    session_id, cursor, upto, strict=start is None
                )
            ]
            if page:
                yield page
                raise _Restart  # locate again after the page
            start = -1  # nothing after the cursor anywhere: follow from the start
        if catch_up and start < 0:
            return  # nothing after the cursor yet
        async with contextlib.aclosing(
            self._consume(session_id, cursor, abs(start), upto, catch_up)
        ) as batches:
            async for batch in batches:
                yield batch

    async def _pause(self) -> None:
        if self._nc.is_closed:
            raise nats.errors.ConnectionClosedError
        await asyncio.sleep(RETRY_S)

    async def locate(self, session_id: str, cursor: int) -> int | None:
        """Stream seq to start from for event ``cursor+1``; None if purged from JS.

        Exact-seq lookups only (O(1)): event cursor+1 if stored; else, if event
        ``cursor`` is stored, we are caught up and follow from just after it
        (answered negative). ``JS_EMPTY`` when JetStream holds nothing of the
        session: new, or wholly purged (then the projector may still have it).
        """
        found = await self._get(session_id, cursor + 1)
        if found is not None:
            return found
        if cursor > 0:
            at_cursor = await self._get(session_id, cursor)
            if at_cursor is not None:
                return -(at_cursor + 1)
        found_first = await self._first(session_id)
        if found_first is None:
            return JS_EMPTY
        first, stream_seq = found_first
        if first == cursor + 1:
            return stream_seq  # appended since the exact lookup above
        if first > cursor:
            return None  # cursor+1 existed and was purged: the projector has it
        raise RangeUnavailableError(session_id, cursor, first, 0, "cursor_ahead")

    async def _get(self, session_id: str, seq: int) -> int | None:
        """Stream seq of event ``seq`` (of a dead letter holding its place, if so)."""
        subject = self._names.log_seq(session_id, seq)
        try:
            msg = await self._js.get_msg(
                self._names.log_stream, subject=subject, direct=True
            )
            if self.check(msg.subject, msg.data, msg.headers, msg.seq) is None:
                # A dead letter published after the event: the event comes first.
                msg = await self._js.get_msg(
                    self._names.log_stream,
                    seq=1,
                    next=True,
                    subject=subject,
                    direct=True,
                )
        except NotFoundError:
            return None
        return msg.seq or 0

    async def _first(self, session_id: str) -> tuple[int, int] | None:
        """Per-session and stream seq of the session's first event in JetStream."""
        stream_seq = 1
        while True:
            try:
                msg = await self._js.get_msg(
                    self._names.log_stream,
                    seq=stream_seq,
                    next=True,
                    subject=self._names.log_session(session_id),
                    direct=True,
                )
            except NotFoundError:
                return None
            item = self.check(msg.subject, msg.data, msg.headers, msg.seq)
            if item is not None:
                return item.seq, msg.seq or 0
            stream_seq = (msg.seq or 0) + 1

    def check(
        self,
        subject: str | None,
        data: bytes | None,
        headers: dict[str, str] | None,
        stream_seq: int | None,
    ) -> StoredEvent | None:
        """The stored event, or None for a dead letter (counted and logged)."""
        why = problem(self._names, subject or "", data, headers)
        if not why:
            return stored(data, headers)
        seq = subject_seq(self._names, subject or "")
        DEAD_LETTERS.note(LogDeadLetter(stream_seq or 0, subject or "", seq, why))
        return None

    async def _consume(
        self, session_id: str, cursor: int, start: int, upto: int | None, catch_up: bool
    ) -> AsyncGenerator[list[StoredEvent], None]:
        """What one consumer delivers, in batches of what had arrived together.

        A batch is handed on before waiting for more, so a follower gets each
        event as soon as it is here; and before a gap restarts the leg, so the
        restart goes on from the last event accepted (else it would read the
        same events up to the same gap again, for ever).
        """
        consumer = PushConsumer(
            self._nc, self._names.log_stream, self._names.log_session(session_id), start
        )
        self._watch.add(consumer)
        items: list[StoredEvent] = []
        restart = False
        try:
            try:
                await consumer.open(self._js_timeout)
                while upto is None or cursor < upto:
                    got = consumer.poll()
                    if got is None:
                        if items:
                            yield items
                            items = []
                        got = await consumer.next()
                    msg, stream_seq, pending = got
                    item = self._accept(msg, stream_seq, cursor)
                    if item is not None:
                        cursor = item.seq
                        if item.raw:
                            items.append(item)
                    if catch_up and pending == 0:
                        break  # replayed everything that existed when we started
            except _Restart:
                restart = True  # a gap, a reconnect, a silent consumer
            if items:
                yield items
            if restart:
                raise _Restart  # locate again from the last event handed on
        finally:
            self._watch.discard(consumer)
            await consumer.close()

    def _accept(self, msg: Msg, stream_seq: int, cursor: int) -> StoredEvent | None:
        """The next event after ``cursor``, or None to skip this message.

        A dead letter holding seq ``cursor + 1``'s place is passed over as an
        empty item (the cursor moves past it, nothing is yielded).
        """
        item = self.check(msg.subject, msg.data, msg.headers, stream_seq)
        if item is None:
            hole = subject_seq(self._names, msg.subject)
            return StoredEvent(cursor + 1, "", b"") if hole == cursor + 1 else None
        if item.seq <= cursor:
            return None  # redelivered after a consumer reset
        if item.seq != cursor + 1:
            raise _Restart  # a gap: locate again from the cursor
        return item

    async def _from_projector(
        self, session_id: str, cursor: int, upto: int | None, strict: bool
    ) -> AsyncIterator[StoredEvent]:
        """Events after ``cursor`` from the projector's SQLite copy.

        ``strict``: JetStream holds later events, so the projector must serve
        ``cursor+1``. Otherwise JetStream holds nothing of the session, and an
        empty answer at the cursor (or no projector, from 0) means caught up.
        """
        page = await self._ask_projector(session_id, cursor, strict)
        if page is None:
            return
        items = [_raw_item(raw) for raw in page.events]
        if not items and not strict and not page.error and page.last <= cursor:
            if page.last < cursor:
                raise RangeUnavailableError(
                    session_id, cursor, 1 if page.last else 0, page.last, "cursor_ahead"
                )
            return  # caught up: nothing after the cursor anywhere yet
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

    async def projector_last(self, session_id: str) -> StoredEvent | None:
        """The last event the projector holds of a session (None: none/no projector).

        For a session JetStream no longer holds at all (retention): its head.
        """
        try:
            page = await self._request(ProjectorRead(session_id, _BEYOND, 1))
            if page.last == 0:
                return None
            page = await self._request(ProjectorRead(session_id, page.last - 1, 1))
        except nats.errors.NoRespondersError:
            return None  # no projector deployed: JetStream is all there is
        if page.error or not page.events:
            return None
        return _raw_item(page.events[0])

    async def _request(self, request: ProjectorRead) -> ProjectorRange:
        reply = await self._nc.request(
            self._names.projector_read,
            _ENC.encode(request),
            timeout=self._projector_timeout,
        )
        return RANGE_DECODER.decode(reply.data)

    async def _ask_projector(
        self, session_id: str, cursor: int, strict: bool
    ) -> ProjectorRange | None:
        request = ProjectorRead(session_id=session_id, after=cursor, limit=1000)
        try:
            return await self._request(request)
        except (TimeoutError, nats.errors.Error, msgspec.DecodeError) as exc:
            if strict:
                raise RangeUnavailableError(
                    session_id,
                    cursor,
                    0,
                    0,
                    f"purged from JetStream; projector: {exc!r}",
                ) from exc
            if cursor > 0:
                raise RangeUnavailableError(
                    session_id, cursor, 0, 0, "cursor_ahead"
                ) from exc
            return None  # no projector and nothing in JetStream: an empty session


def _transient(exc: BaseException) -> bool:
    """An error NATS gives while restarting or reconnecting (not a refusal)."""
    if isinstance(exc, APIError):
        return isinstance(exc, ServiceUnavailableError)  # JetStream not ready yet
    return not isinstance(exc, nats.errors.ConnectionClosedError)


def stored(data: bytes | None, headers: dict[str, str] | None) -> StoredEvent:
    """A stored event from a JetStream message's bytes and headers."""
    hdrs = headers or {}
    return StoredEvent(int(hdrs[SEQ_HEADER]), hdrs[TYPE_HEADER], data or b"")


def _raw_item(raw: msgspec.Raw) -> StoredEvent:
    data = bytes(raw)
    head = SEQTYPE_DECODER.decode(data)
    return StoredEvent(head.seq, head.type, data)
