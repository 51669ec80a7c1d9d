"""A bounded cache of session summaries, folded incrementally from the log.

The log is the truth: every lookup asks JetStream for the head and folds only
the events after the cached seq, so two gateways always agree and a lookup costs
one direct get when nothing changed. With ``snapshots``, a cold lookup starts
from the session's summary snapshot, and a fold that went ``every`` events past
the last snapshot stores a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, cast

from nats.aio.client import Client

from eventstore.errors import RangeUnavailableError
from eventstore.fold import SessionSummary, evolve_stored
from eventstore.log import JetStreamLog, StoredEvent
from services.gateway.heads import current

if TYPE_CHECKING:
    from services.gateway.snapshots import SummarySnapshots


# Events read by one batched direct get before the consumer path (≤ BATCH_MAX).
FEW = 16
# How long the batched head check waits for each message of its answer.
WAIT_S = 2.0


class SummaryCache:
    """LRU of ``SessionSummary`` per session (each knows its last folded seq)."""

    def __init__(
        self,
        log: JetStreamLog,
        size: int = 4096,
        page: int = 1000,
        snapshots: SummarySnapshots | None = None,
        nc: Client | None = None,
    ) -> None:
        self._log = log
        self._nc = nc  # for checking many heads in one request (``many``)
        self._size = max(1, size)
        self._page = page
        self._snapshots = snapshots
        self._entries: OrderedDict[str, SessionSummary] = OrderedDict()
        # session → seq of its newest snapshot this gateway knows of
        self._snapped: dict[str, int] = {}
        # session → (lock, callers holding or waiting for it)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, session_id: str) -> SessionSummary:
        """The session's summary as of its current head.

        Lookups of one session take turns: a cold fold of a long log is done
        once, and the callers queued behind it only read what came after.
        """
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                return await self._get(session_id)
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)

    async def many(self, session_ids: list[str]) -> list[SessionSummary]:
        """Summaries of several sessions (a listing page), concurrently.

        Cached ones whose log did not move are confirmed by one batched request
        for all of them; the rest are looked up as :meth:`get` does.
        """
        cached = {s: e for s in session_ids if (e := self._entries.get(s)) is not None}
        fresh: set[str] = set()
        if self._nc is not None and cached:
            last = {sid: summary.last_seq for sid, summary in cached.items()}
            fresh = await current(self._nc, self._log.names, last, WAIT_S)
        async with asyncio.TaskGroup() as group:
            tasks = {
                sid: group.create_task(self.get(sid))
                for sid in session_ids
                if sid not in fresh
            }
        for sid in fresh & self._entries.keys():
            self._entries.move_to_end(sid)
        return [cached[s] if s in fresh else tasks[s].result() for s in session_ids]

    async def _get(self, session_id: str) -> SessionSummary:
        cached = self._entries.get(session_id)
        snapped = self._snapped.get(session_id, 0)
        if cached is None:
            summary, last, snapped = await self._cold(session_id)
        else:
            try:
                summary, last = await self._fold(session_id, cached)
            except RangeUnavailableError:
                if not cached.last_seq:
                    raise
                # Cached past the log's head (stream re-created): fold again.
                self._entries.pop(session_id, None)
                summary, last = await self._fold(session_id, SessionSummary())
                snapped = 0
        self._snapped[session_id] = snapped
        self._remember(session_id, summary)
        await self._maybe_snapshot(session_id, summary, last, snapped)
        return summary

    async def _cold(
        self, session_id: str
    ) -> tuple[SessionSummary, StoredEvent | None, int]:
        """A session not in the cache: (summary, last event folded, snapshot seq).

        A short log (most sessions) is folded from one batched read; a longer
        one from its snapshot, if it has one the log agrees with.
        """
        events = await self._log.read(session_id, 0, FEW)
        summary = SessionSummary()
        for stored in events:
            summary = evolve_stored(summary, stored)
        if len(events) < FEW:
            return summary, events[-1] if events else None, 0
        loaded = await self._snapshots.load(session_id) if self._snapshots else None
        if loaded is not None and loaded.last_seq > summary.last_seq:
            folded, last = await self._fold(session_id, loaded)
            return folded, last, loaded.last_seq
        folded, last = await self._fold(session_id, summary)
        return folded, last or events[-1], 0

    async def _maybe_snapshot(
        self,
        session_id: str,
        summary: SessionSummary,
        last: StoredEvent | None,
        snapped: int,
    ) -> None:
        """Store a snapshot when this fold went ``every`` events past the last."""
        if self._snapshots is None or last is None or last.seq != summary.last_seq:
            return
        due = summary.last_seq - snapped >= self._snapshots.every
        if due and await self._snapshots.save(session_id, summary, last.raw):
            self._snapped[session_id] = summary.last_seq

    async def _fold(
        self, session_id: str, summary: SessionSummary
    ) -> tuple[SessionSummary, StoredEvent | None]:
        """The summary folded to the head, and the last event folded (if any)."""
        # The usual case, a few new events or none: one batched direct get (an
        # ordered consumer costs a few ms to set up, even for one event).
        events = await self._log.read(session_id, summary.last_seq, FEW)
        if len(events) == FEW:
            events += await self._log.read(session_id, events[-1].seq, self._page)
        last = events[-1] if events else None
        for stored in events:
            summary = evolve_stored(summary, stored)
        if len(events) < self._page + FEW:
            return summary, last
        # A long way behind (cold cache, long session): one consumer to the head
        # rather than a consumer per page.
        target = await self._log.last_seq(session_id)
        if summary.last_seq >= target:
            return summary, last
        tail = cast(
            AsyncGenerator[StoredEvent, None],
            self._log.tail(session_id, summary.last_seq),
        )
        async with contextlib.aclosing(tail) as stream:
            async for stored in stream:
                summary, last = evolve_stored(summary, stored), stored
                if summary.last_seq >= target:
                    break
        return summary, last

    def _remember(self, session_id: str, summary: SessionSummary) -> None:
        current = self._entries.get(session_id)
        # Two concurrent folds may finish out of order: keep the newer.
        if current is None or current.last_seq <= summary.last_seq:
            self._entries[session_id] = summary
        self._entries.move_to_end(session_id)
        while len(self._entries) > self._size:
            evicted, _ = self._entries.popitem(last=False)
            self._snapped.pop(evicted, None)
