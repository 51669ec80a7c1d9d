"""Coalesce streamed tokens into a few delta events per second."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

Emit = Callable[[str, str], Awaitable[None]]


class DeltaCoalescer:
    """Buffers text per kind (``message`` / ``thought``); flushes every interval.

    A token arriving after a quiet interval goes out at once; tokens inside one
    interval are joined; a timer flushes a tail the stream left waiting, so text
    is never held longer than the interval. A change of kind flushes first, so
    the order of the kinds is kept.
    """

    def __init__(self, emit: Emit, interval_s: float = 0.05) -> None:
        self._emit = emit
        self.interval_s = interval_s
        self._kind: str | None = None
        self._buf: list[str] = []
        self._last = 0.0
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None
        self.emitted = 0

    async def add(self, kind: str, text: str) -> None:
        """Buffer ``text`` of ``kind``; may emit."""
        if not text:
            return
        if self._kind is not None and kind != self._kind:
            await self.flush()
        self._kind = kind
        self._buf.append(text)
        if time.monotonic() - self._last >= self.interval_s:
            await self.flush()
        elif self._timer is None:
            self._timer = asyncio.create_task(self._later())

    async def _later(self) -> None:
        await asyncio.sleep(max(0.0, self._last + self.interval_s - time.monotonic()))
        self._timer = None
        await self.flush()

    async def flush(self) -> None:
        """Emit whatever is buffered."""
        async with self._lock:
            if not self._buf or self._kind is None:
                return
            text, self._buf = "".join(self._buf), []
            self._last = time.monotonic()
            self.emitted += 1
            await self._emit(self._kind, text)

    async def close(self) -> None:
        """Flush and stop the timer."""
        timer, self._timer = self._timer, None
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
        await self.flush()

    def discard(self) -> None:
        """Drop what is buffered and stop a waiting timer (a flush under way ends)."""
        timer, self._timer = self._timer, None
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
        self._buf = []

    async def drop(self) -> None:
        """Forget what is buffered, after a flush under way has gone out.

        Afterwards nothing buffered before the call is emitted, so an event the
        caller appends next follows every delta this coalescer sent.
        """
        self._buf = []
        async with self._lock:  # a flush holding the lock finishes first
            self._buf = []
            self._kind = None
            timer, self._timer = self._timer, None
            if timer is not None and timer is not asyncio.current_task():
                timer.cancel()
