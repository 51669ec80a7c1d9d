"""A running command's output as a few bounded ``tool.update`` events."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from services.pool.coalesce import DeltaCoalescer

log = logging.getLogger(__name__)

Emit = Callable[[str, str], Awaitable[None]]
UPDATE_INTERVAL_S = 0.1  # ≤ ~10 events/s per call (a change of stream flushes)
MAX_EVENT_CHARS = 8 * 1024


class LiveOutput:
    """Coalesce one call's output text into events of ``(stream, text)``.

    Text inside one interval is joined (as for message deltas); an event holds at
    most ``MAX_EVENT_CHARS``; past ``limit`` characters in all nothing more is
    sent (the ``tool.result`` has what the model sees). Live output is a view:
    a failing append stops it and never fails the command.
    """

    def __init__(
        self, emit: Emit, *, limit: int, interval_s: float = UPDATE_INTERVAL_S
    ) -> None:
        self._emit = emit
        self._left = limit
        self._coalescer = DeltaCoalescer(self._send, interval_s)
        self.sent_chars = 0

    async def add(self, stream: str, text: str) -> None:
        """Take a chunk of decoded output; may emit."""
        if self._left <= 0 or not text:
            return
        text = text[: self._left]
        self._left -= len(text)
        await self._coalescer.add(stream, text)

    async def _send(self, stream: str, text: str) -> None:
        for i in range(0, len(text), MAX_EVENT_CHARS):
            if self._left < 0:
                return
            try:
                await self._emit(stream, text[i : i + MAX_EVENT_CHARS])
            except Exception:
                log.exception("live output stopped")
                self._left = -1  # nothing more, not even what is buffered
                return
            self.sent_chars += min(MAX_EVENT_CHARS, len(text) - i)

    async def close(self) -> None:
        """Send what is buffered (before the tool's result)."""
        await self._coalescer.close()

    def discard(self) -> None:
        """Drop what is buffered (the call was cancelled or failed)."""
        self._left = -1
        self._coalescer.discard()
