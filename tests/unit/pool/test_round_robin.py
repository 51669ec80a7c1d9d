"""The pool's round robin: a released session's older wake-ups are dropped, not
nak'd (JetStream redelivers nak'd messages before undelivered ones, so a nak'd
session jumped ahead of the sessions waiting); idle workers get a grace."""

from __future__ import annotations

import time
from typing import Any, cast

from services.pool.pool import FAIR_SHARE_S, IDLE_GRACE_S, WarmPool, _may_yield
from services.pool.settings import PoolSettings


def _pool() -> WarmPool:
    none = cast(Any, None)
    return WarmPool(
        PoolSettings(),
        js=none,
        log_=none,
        leases=none,
        assignments=none,
        wake=none,
        host="h",
    )


BEFORE = 1.0  # stored long before any release noted in these tests


def test_wake_ups_older_than_the_release_rewake_are_superseded() -> None:
    pool = _pool()
    pool._note_requeued("s1", 40)
    assert pool._superseded("s1", 12, BEFORE)
    assert pool._superseded("s1", 39, BEFORE)
    assert not pool._superseded("s2", 12, BEFORE), "another session is unaffected"
    assert not pool._superseded("s1", 40, BEFORE), "the re-wake serves the session"
    assert not pool._superseded("s1", 20, BEFORE), "after it, nothing is dropped"


def test_a_newer_release_moves_the_cut() -> None:
    pool = _pool()
    pool._note_requeued("s1", 40)
    pool._note_requeued("s1", 55)
    assert pool._superseded("s1", 41, BEFORE)
    assert not pool._superseded("s1", 55, BEFORE)


def test_a_wake_up_stored_after_the_release_is_never_dropped() -> None:
    # The wake stream was re-created meanwhile: its seqs start at 1 again.
    pool = _pool()
    pool._note_requeued("s1", 40)
    assert not pool._superseded("s1", 3, time.time() + 1)


class _W:
    def __init__(self, idle_since: float | None, held_since: float) -> None:
        self.held = object()
        self.yield_sent = False
        self.idle_since = idle_since
        self.held_since = held_since


def test_an_idle_session_yields_after_its_grace_a_busy_one_after_its_share() -> None:
    now = 1000.0
    just_idle = cast(Any, _W(now - IDLE_GRACE_S / 2, now - 10))
    idle = cast(Any, _W(now - IDLE_GRACE_S, now - 10))
    young = cast(Any, _W(None, now - FAIR_SHARE_S / 2))
    old = cast(Any, _W(None, now - FAIR_SHARE_S))
    assert [_may_yield(w, now) for w in (just_idle, idle, young, old)] == [
        False,
        True,
        False,
        True,
    ]
