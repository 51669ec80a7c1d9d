"""``GET /v1/sessions/{sid}/usage`` and ``GET /v1/usage?from=&to=``.

Usage is folded from the session logs on request (``usage_fold``): the log is
the truth, so every gateway answers the same and a replayed log costs the
same. Only ``turn.ended`` and ``sandbox.usage`` envelopes are decoded (the type
is in the stored headers). Another device's session is the usual 404.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime

from aiohttp import web

from eventstore.index import SessionIndex
from eventstore.log import JetStreamLog
from schemas.api import DeviceUsage, SessionUsage
from schemas.events import SandboxUsage, TurnEnded
from services.gateway.errors import InvalidRequestError
from services.gateway.prices import PriceTable
from services.gateway.usage_fold import UsageFold, add_up, unix_of

USAGE_TYPES = frozenset({TurnEnded.TYPE, SandboxUsage.TYPE})
DEFAULT_WINDOW_S = 30 * 86400.0


def rfc3339(unix: float) -> str:
    """Unix seconds → RFC 3339 UTC with milliseconds."""
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds")


def window_of(request: web.Request, now: float) -> tuple[float, float]:
    """``?from=&to=`` (RFC 3339; default: the 30 days up to now) → unix seconds."""
    bounds = {}
    for name in ("from", "to"):
        raw = request.query.get(name)
        if raw is None:
            continue
        try:
            bounds[name] = unix_of(raw)
        except ValueError:
            raise InvalidRequestError(
                f"{name} must be an RFC 3339 time, e.g. 2026-01-31T00:00:00Z", name
            ) from None
    end = bounds.get("to", now)
    start = bounds.get("from", end - DEFAULT_WINDOW_S)
    if start >= end:
        raise InvalidRequestError("from must be before to", "from")
    return start, end


class UsageReader:
    """Folds usage out of session logs."""

    def __init__(
        self,
        log: JetStreamLog,
        index: SessionIndex,
        prices: PriceTable,
        page: int = 5000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._log = log
        self._index = index
        self.prices = prices
        self._page = page
        self._clock = clock

    async def session(
        self, session_id: str, start: float = -math.inf, end: float = math.inf
    ) -> SessionUsage:
        """One session's usage within ``[start, end)``."""
        fold = UsageFold(self.prices, start, end)
        after = 0
        while True:
            events = await self._log.read(session_id, after, self._page)
            for stored in events:
                if stored.type in USAGE_TYPES:
                    fold.add(stored.event())
            if len(events) < self._page:
                return fold.result(session_id, self._clock())
            after = events[-1].seq

    async def device(self, device_id: str, start: float, end: float) -> DeviceUsage:
        """A device's totals and per-session usage within ``[start, end)``."""
        parts = []
        for record in await self._index.list(device_id):
            if record.created_at and unix_of(record.created_at) >= end:
                continue  # opened after the window
            usage = await self.session(record.session_id, start, end)
            if (
                usage.turns
                or usage.cost.total
                or any((usage.sandbox_seconds.running, usage.sandbox_seconds.paused))
            ):
                parts.append(usage)
        total = add_up(parts)
        return DeviceUsage(
            from_=rfc3339(start),
            to=rfc3339(end),
            tokens=total.tokens,
            model_seconds=total.model_seconds,
            turns=total.turns,
            sandbox_seconds=total.sandbox_seconds,
            archive_gb_months=total.archive_gb_months,
            cost=total.cost,
            sessions=parts,
        )

    def now(self) -> float:
        """The reader's clock (unix seconds)."""
        return self._clock()
