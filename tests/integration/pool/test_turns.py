"""Scripted turns through a real pool: wake-up → lease → worker → turn.ended."""

from __future__ import annotations

import os
import socket

from schemas.events import AgentMessage, TurnEnded, WorkerAssigned
from tests.integration.pool.harness import Harness, busy


async def test_scripted_prompt_runs_a_turn_with_assignment_message_and_usage(
    harness: Harness,
) -> None:
    await harness.pool()
    sid = await harness.session()
    seq, turn = await harness.script(sid, {"think": "a plan"}, {"say": "hello world"})
    ended = await harness.ended(sid, turn)
    assert ended.data.stop_reason == "end_turn"
    assert ended.data.usage.output_tokens > 0
    events = await harness.events(sid)
    types = [e.type for e in events]
    assigned = next(e.data for e in events if isinstance(e.data, WorkerAssigned))
    assert assigned.host == socket.gethostname()
    assert assigned.pid > 0
    assert assigned.pid != os.getpid()
    started = next(e for e in events if e.type == "turn.started")
    assert started.data.prompt_seq == seq
    message = next(e.data for e in events if isinstance(e.data, AgentMessage))
    assert message.text == "hello world"
    assert message.thought == "a plan"
    deltas = "".join(e.data.text for e in events if e.type == "agent.message.delta")
    assert deltas == "hello world"
    assert types.index("worker.assigned") < types.index("turn.started")
    assert all(e.actor == f"worker:{assigned.worker_id}" for e in events[2:])


async def test_prompt_made_while_no_pool_runs_is_served_when_one_starts(
    harness: Harness,
) -> None:
    sid = await harness.session()
    _, turn = await harness.script(sid, {"say": "late but served"})
    await harness.pool()
    ended = await harness.ended(sid, turn)
    assert ended.data.stop_reason == "end_turn"


async def test_queued_prompts_run_one_at_a_time_in_prompt_order(
    harness: Harness,
) -> None:
    sid = await harness.session()
    turns = [(await harness.script(sid, {"say": f"answer {i}"}))[1] for i in range(3)]
    await harness.pool()
    await harness.ended(sid, turns[-1])
    events = await harness.events(sid)
    lifecycle = [
        (e.type, e.data.turn_id)
        for e in events
        if e.type in ("turn.started", "turn.ended")
    ]
    expected = []
    for turn in turns:
        expected += [("turn.started", turn), ("turn.ended", turn)]
    assert lifecycle == expected
    texts = [e.data.text for e in events if isinstance(e.data, AgentMessage)]
    assert texts == ["answer 0", "answer 1", "answer 2"]


async def test_more_sessions_than_workers_wait_their_turn_and_idle_ones_yield(
    harness: Harness,
) -> None:
    # T1 stays at its 10 minute default: waiting sessions make idle ones yield.
    running = await harness.pool(pool_workers=1)
    sessions = [await harness.session() for _ in range(3)]
    turns = [(await harness.script(sid, {"say": "x" * 5}))[1] for sid in sessions]
    for sid, turn in zip(sessions, turns, strict=True):
        ended = await harness.ended(sid, turn)
        assert ended.data.stop_reason == "end_turn"
    assert len(busy(running.pool)) <= 1
    for sid in sessions[:2]:
        released = await harness.wait_for(sid, lambda e: e.type == "worker.released")
        assert released.data.reason == "yield"


async def test_a_malformed_script_ends_the_turn_with_a_clear_error(
    harness: Harness,
) -> None:
    await harness.pool()
    sid = await harness.session()
    _, turn = await harness.prompt(sid, '{"script": [{"dance": 1}]}')
    ended = await harness.ended(sid, turn)
    assert isinstance(ended.data, TurnEnded)
    assert ended.data.stop_reason == "error"
    errors = [e.data for e in await harness.events(sid) if e.type == "error"]
    assert errors
    assert errors[0].code == "bad_script"
    assert "script[0]" in errors[0].message


async def test_step_limit_ends_the_turn_with_max_steps(harness: Harness) -> None:
    await harness.pool(pool_max_steps=2)
    sid = await harness.session()
    steps = [{"tool": "nope", "args": {}} for _ in range(5)]
    _, turn = await harness.script(sid, *steps)
    ended = await harness.ended(sid, turn)
    assert ended.data.stop_reason == "max_steps"
    results = [e.data for e in await harness.events(sid) if e.type == "tool.result"]
    assert len(results) == 2
    assert all(not r.ok and "no such tool" in (r.error or "") for r in results)
