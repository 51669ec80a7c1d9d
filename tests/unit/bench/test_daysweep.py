"""The day bench's timer replay and state timeline, on hand-computed examples."""

from __future__ import annotations

import pytest

from bench.daysweep import Activity, replay, sweep, timeline
from services.gateway.prices import price_table

PRICES = price_table(1.0, 0.01, 0.0, "")
DAY_END = 10_000.0
# One session: a 100 s turn (really 1 s), idle 900 s, a 50 s turn, then idle.
ACTS = {"s": [Activity(0, 100, 1.0), Activity(1000, 1050, 0.5)]}


def test_tiered_replay_runs_t2_pauses_t3_then_archives() -> None:
    # running: 100 + 50 (turns) + 600 (after the 1st) + 600 (after the 2nd)
    # paused: 300 (the 1st gap's rest) + 3600; archived: the remaining 4750.
    cost = replay(ACTS, {"s": 0.0}, DAY_END, 600, 3600, 0, PRICES)
    assert cost == pytest.approx(1350 * 1.0 + 3900 * 0.01)


def test_real_length_turns_count_only_their_real_seconds() -> None:
    cost = replay(ACTS, {"s": 0.0}, DAY_END, 600, 3600, 0, PRICES, real_turns=True)
    assert cost == pytest.approx(1201.5 * 1.0 + 3900 * 0.01)


def test_the_sweep_counts_resumes_by_the_tier_the_gap_ended_in() -> None:
    rows = sweep(ACTS, {"s": 0.0}, DAY_END, 0, PRICES, plan_a=DAY_END * 1.0)
    by = {(r["policy"], r.get("T2", r.get("T")), r.get("T3")): r for r in rows}
    assert by[("tiered", 600.0, 3600.0)]["resumes"] == {
        "running": 0,
        "paused": 1,
        "archived": 0,
    }
    assert by[("tiered", 1800.0, 3600.0)]["resumes"]["running"] == 1
    assert by[("single", 600.0, None)]["resumes"]["archived"] == 1


def test_the_timeline_counts_sandboxes_by_their_latest_state() -> None:
    states = {"a": [(0.0, "running"), (50.0, "paused")], "b": [(60.0, "running")]}
    got = timeline(states, (0.0, 100.0), points=2)
    assert got["running"] == [1, 0, 1]
    assert got["paused"] == [0, 1, 1]
