"""A short chaos run (bench/chaos.py) against a real `agentbus up`: the zero counts.

Three sessions under load; the gateway is SIGKILLed and comes back under
supervision, every reader resuming with Last-Event-ID (bench/chaos.py runs every
other fault; test_supervision.py kills nats-server). Counts, not times: no
event lost or duplicated at any reader, no prompt left unanswered, every
session's audit verifies, no sandbox or process left behind.
"""

from __future__ import annotations

import argparse

import pytest

from bench.chaos import run

pytestmark = pytest.mark.timeout(240)


async def test_short_chaos_run_loses_nothing(tmp_path):
    args = argparse.Namespace(
        nats_cluster=1,
        sessions=3,
        workers=2,
        faults=["gateway"],
        recovery_limit_s=60.0,
        settle_s=1.0,
    )
    result = await run(args, tmp_path)
    for fault in args.faults:
        counts = result["faults"][fault]
        assert counts["sessions_recovered"] == 3, (fault, counts)
        for key in ("lost", "duplicated", "unanswered"):
            assert counts[key] == 0, (fault, key, counts)
    assert result["prompts"] > 3
    assert {k: result["totals"][k] for k in ("lost", "duplicated", "unanswered")} == {
        "lost": 0,
        "duplicated": 0,
        "unanswered": 0,
    }
    assert result["audit"]["log_verified"] == 3
    assert result["audit"]["projector_verified"] == 3
    assert result["orphan_sandboxes"] == {
        "deletes_accepted": 3,
        "sandboxes_running_after": 0,
    }
    assert result["leftover_processes"]["after_stop"] == 0
