"""A short chaos run (bench/chaos.py) against a real `agentbus up`: the zero counts.

Three sessions under load; the gateway is SIGKILLed and comes back under
supervision, every reader resuming with Last-Event-ID; then the broker is
SIGKILLed while a fourth session's sandbox create is held by the sandbox host
(bench/chaos.py runs every other fault; test_supervision.py kills
nats-server). Counts, not times: no event lost or duplicated at any reader, no
prompt left unanswered, every session's audit verifies, no sandbox or process
left behind.
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
        faults=["gateway", "broker_create"],
        recovery_limit_s=60.0,
        settle_s=1.0,
    )
    result = await run(args, tmp_path)
    assert "mid-create" in result["faults"]["broker_create"]["killed"]
    for fault, sessions in (("gateway", 3), ("broker_create", 4)):
        counts = result["faults"][fault]
        assert counts["sessions_recovered"] == sessions, (fault, counts)
        for key in ("lost", "duplicated", "unanswered"):
            assert counts[key] == 0, (fault, key, counts)
    assert result["prompts"] > 3
    assert {k: result["totals"][k] for k in ("lost", "duplicated", "unanswered")} == {
        "lost": 0,
        "duplicated": 0,
        "unanswered": 0,
    }
    assert result["audit"]["log_verified"] == 4
    assert result["audit"]["projector_verified"] == 4
    assert result["orphan_sandboxes"] == {
        "deletes_accepted": 4,
        "sandboxes_running_after": 0,
    }
    assert result["leftover_processes"]["after_stop"] == 0
