"""Per-device caps: open sessions, live sandboxes, concurrent event streams.

Sessions and sandboxes are counted from what the gateway already has: the
device's records in the session index and their folded summaries (the log is
the truth, the summary cache makes a fold one direct get when nothing changed).
A device under the cap by its raw record count costs one index listing; only
a device with at least ``cap`` records has its summaries folded.

The gateway never creates sandboxes itself: a prompt is what makes a worker bind
one, so a prompt to a session *without* a live sandbox is refused while the
device already has ``max_sandboxes`` live ones. Streams are counted by every
gateway process for itself and summed through an expiring KV bucket
(``streamcount.py``), so the cap holds across replicas.

Checks and the command they guard are not atomic: concurrent requests of one
device can overshoot a cap by the number in flight. The caps bound abuse; they
are not a quota ledger.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec

from eventstore.index import SessionIndex, SessionRecord
from services.gateway.errors import GatewayError
from services.gateway.streamcount import StreamCounts
from services.gateway.summaries import SummaryCache

# Sandbox states that hold compute (paused/archived ones cost storage only).
LIVE_SANDBOX = frozenset({"creating", "running", "pausing", "resuming", "rebuilding"})


class CapExceededError(GatewayError):
    """A per-device cap is reached (429 with a code naming which)."""

    def __init__(self, code: str, what: str, cap: int) -> None:
        super().__init__(429, code, f"this device already has {cap} {what} (the cap)")


class CapLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The caps; 0 turns one off."""

    sessions: int = 0
    sandboxes: int = 0
    streams: int = 0


class DeviceCaps:
    """Checks a device's counts against :class:`CapLimits`."""

    def __init__(
        self,
        limits: CapLimits,
        index: SessionIndex,
        summaries: SummaryCache,
        streams: StreamCounts | None = None,
    ) -> None:
        self.limits = limits
        self._index = index
        self._summaries = summaries
        self.streams = streams or StreamCounts(None)

    async def check_new_session(self, device_id: str) -> None:
        """429 ``too_many_sessions`` if the device has ``sessions`` open ones."""
        cap = self.limits.sessions
        if cap <= 0:
            return
        records = await self._index.list(device_id)
        if len(records) < cap:
            return
        open_count = 0
        for record in records:
            summary = await self._summaries.get(record.session_id)
            open_count += not summary.closed
            if open_count >= cap:
                raise CapExceededError("too_many_sessions", "open sessions", cap)

    async def check_sandbox_for(self, record: SessionRecord) -> None:
        """429 ``too_many_sandboxes`` if a prompt here could start one too many."""
        cap = self.limits.sandboxes
        if cap <= 0:
            return
        if (await self._summaries.get(record.session_id)).sandbox in LIVE_SANDBOX:
            return  # this session's sandbox is already counted
        records = await self._index.list(record.device_id)
        if len(records) <= cap:
            return  # even if every other session had one, one more fits
        live = 0
        for other in records:
            if other.session_id == record.session_id:
                continue
            summary = await self._summaries.get(other.session_id)
            live += not summary.closed and summary.sandbox in LIVE_SANDBOX
            if live >= cap:
                raise CapExceededError("too_many_sandboxes", "live sandboxes", cap)

    @asynccontextmanager
    async def stream(self, device_id: str) -> AsyncIterator[None]:
        """Count one open event stream of the device for the ``async with`` block."""
        cap = self.limits.streams
        if cap <= 0:
            yield
            return
        if await self.streams.total(device_id) >= cap:
            raise CapExceededError("too_many_streams", "open event streams", cap)
        await self.streams.add(device_id, +1)
        try:
            yield
        finally:
            await asyncio.shield(self.streams.add(device_id, -1))
