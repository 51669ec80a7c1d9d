"""Fold a session's log into its usage and cost over a time window.

Turn usage comes from ``turn.ended`` (counted when its ``ts`` is in the window);
sandbox time from ``sandbox.usage``: each one closes an interval of ``seconds``
in ``state`` ending at ``at`` (the broker's clock), and opens the next state's
interval, which the fold closes itself at the window's end. Intervals are
clipped to the window, so a month's usage never counts a day twice.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TypeVar

import msgspec

from schemas.api import SandboxSeconds, SessionUsage, TokenCounts, UsageCost
from schemas.events import Event, SandboxUsage, TurnEnded
from services.gateway.prices import GB_MONTH_BYTE_SECONDS, PriceTable

STATES = ("running", "paused", "archived")
S = TypeVar("S", bound=msgspec.Struct)


def unix_of(ts: str) -> float:
    """RFC 3339 → unix seconds (``ValueError`` if malformed)."""
    return datetime.fromisoformat(ts).timestamp()


class UsageFold:
    """Accumulates one session's usage in ``[start, end)``; feed events in order."""

    def __init__(
        self, prices: PriceTable, start: float = -math.inf, end: float = math.inf
    ) -> None:
        self.prices = prices
        self.start, self.end = start, end
        self.tokens = [0, 0, 0]  # input, output, cached
        self.token_cost = [0.0, 0.0, 0.0]
        self.model_s = 0.0
        self.turns = 0
        self.seconds = dict.fromkeys(STATES, 0.0)
        self.byte_seconds = 0.0
        self.state: str | None = None
        self.since = 0.0
        self.archive_bytes = 0

    def add(self, event: Event) -> None:
        """Fold one event (others than turn.ended and sandbox.usage are ignored)."""
        data = event.data
        if isinstance(data, TurnEnded):
            if self.start <= unix_of(event.ts) < self.end:
                self._turn(data)
        elif isinstance(data, SandboxUsage):
            at = data.at or unix_of(event.ts)
            if data.state is not None:
                self._interval(data.state, at - data.seconds, at)
            self.state, self.since = data.next_state, at
            self.archive_bytes = data.archive_bytes

    def _turn(self, data: TurnEnded) -> None:
        usage = data.usage
        price = self.prices.model(data.model)
        fresh = max(0, usage.input_tokens - usage.cached_input_tokens)
        self.tokens[0] += usage.input_tokens
        self.tokens[1] += usage.output_tokens
        self.tokens[2] += usage.cached_input_tokens
        self.token_cost[0] += fresh * price.input / 1e6
        self.token_cost[1] += usage.output_tokens * price.output / 1e6
        self.token_cost[2] += usage.cached_input_tokens * price.cached / 1e6
        self.model_s += usage.model_s
        self.turns += 1

    def _interval(self, state: str, begin: float, finish: float) -> None:
        took = min(finish, self.end) - max(begin, self.start)
        if took <= 0 or state not in self.seconds:
            return
        self.seconds[state] += took
        if state == "archived":
            self.byte_seconds += took * self.archive_bytes

    def result(self, session_id: str, now: float) -> SessionUsage:
        """The usage so far; the open state counts until ``now`` (or the end)."""
        seconds, byte_seconds = dict(self.seconds), self.byte_seconds
        if self.state is not None:
            took = min(now, self.end) - max(self.since, self.start)
            if took > 0:
                seconds[self.state] += took
                if self.state == "archived":
                    byte_seconds += took * self.archive_bytes
        gb_months = byte_seconds / GB_MONTH_BYTE_SECONDS
        return SessionUsage(
            session_id=session_id,
            tokens=TokenCounts(
                input=self.tokens[0], output=self.tokens[1], cached=self.tokens[2]
            ),
            model_seconds=round(self.model_s, 3),
            turns=self.turns,
            sandbox_seconds=SandboxSeconds(
                **{k: round(v, 3) for k, v in seconds.items()}
            ),
            archive_gb_months=gb_months,
            cost=self._cost(seconds, gb_months),
        )

    def _cost(self, seconds: dict[str, float], gb_months: float) -> UsageCost:
        p = self.prices
        items = {
            "running": seconds["running"] * p.running_per_s,
            "paused": seconds["paused"] * p.paused_per_s,
            "archived": gb_months * p.archived_gb_month,
            "input_tokens": self.token_cost[0],
            "output_tokens": self.token_cost[1],
            "cached_tokens": self.token_cost[2],
        }
        return UsageCost(**items, total=sum(items.values()))


def _summed(cls: type[S], parts: list[S]) -> S:
    return cls(**{f: sum(getattr(p, f) for p in parts) for f in cls.__struct_fields__})


def add_up(usages: list[SessionUsage]) -> SessionUsage:
    """The sum of several sessions' usage (``session_id`` empty)."""
    return SessionUsage(
        session_id="",
        tokens=_summed(TokenCounts, [u.tokens for u in usages]),
        model_seconds=round(sum(u.model_seconds for u in usages), 3),
        turns=sum(u.turns for u in usages),
        sandbox_seconds=_summed(SandboxSeconds, [u.sandbox_seconds for u in usages]),
        archive_gb_months=sum(u.archive_gb_months for u in usages),
        cost=_summed(UsageCost, [u.cost for u in usages]),
    )
