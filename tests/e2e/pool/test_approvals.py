"""Approvals (allow / reject / always, durable across a worker crash) and cancel."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from schemas.events import PermissionRequested, PolicyUpdated, ToolResult
from tests.integration.pool.harness import Harness

BASH = {"tool": "bash", "args": {"command": "echo ran"}}


async def requested(h: Harness, sid: str, after: int = 0) -> PermissionRequested:
    event = await h.wait_for(sid, lambda e: e.type == "permission.requested", after)
    assert isinstance(event.data, PermissionRequested)
    return event.data


async def last_result(h: Harness, sid: str) -> ToolResult:
    return [e.data for e in await h.events(sid) if isinstance(e.data, ToolResult)][-1]


async def test_ask_exec_asks_for_bash_only_and_allow_once_runs_it(e2e: Harness) -> None:
    await e2e.pool(approval="ask-exec")
    sid = await e2e.session()
    write = {"tool": "write", "args": {"path": "x.txt", "content": "x"}}
    _, turn = await e2e.script(sid, write, BASH)
    request = await requested(e2e, sid)
    assert request.tool == "bash"
    assert [o.option_id for o in request.options] == [
        "allow_once", "allow_always", "reject_once", "reject_always",
    ]  # fmt: skip
    await e2e.answer(sid, request.request_id, "allow_once")
    assert (await e2e.ended(sid, turn)).data.stop_reason == "end_turn"
    events = await e2e.events(sid)
    assert sum(e.type == "permission.requested" for e in events) == 1
    result = await last_result(e2e, sid)
    assert result.ok
    assert result.output == "ran\n"


async def test_a_rejection_becomes_the_tool_result_and_the_turn_goes_on(
    e2e: Harness,
) -> None:
    await e2e.pool(approval="ask-exec")
    sid = await e2e.session()
    _, turn = await e2e.script(sid, BASH, {"say": "fine, I won't"})
    request = await requested(e2e, sid)
    await e2e.answer(sid, request.request_id, "reject_once")
    assert (await e2e.ended(sid, turn)).data.stop_reason == "end_turn"
    result = await last_result(e2e, sid)
    assert not result.ok
    assert result.error == "the user rejected this tool call"
    texts = [e.data.text for e in await e2e.events(sid) if e.type == "agent.message"]
    assert texts == ["fine, I won't"]


async def test_allow_always_becomes_a_policy_event_later_turns_honour(
    e2e: Harness,
) -> None:
    await e2e.pool(approval="ask-all")
    sid = await e2e.session()
    _, first = await e2e.script(sid, BASH)
    request = await requested(e2e, sid)
    await e2e.answer(sid, request.request_id, "allow_always")
    await e2e.ended(sid, first)
    _, second = await e2e.script(sid, BASH, BASH)
    assert (await e2e.ended(sid, second)).data.stop_reason == "end_turn"
    events = await e2e.events(sid)
    policies = [e.data for e in events if isinstance(e.data, PolicyUpdated)]
    assert len(policies) == 1
    assert policies[0].tool == "bash"
    assert policies[0].decision == "allow"
    assert policies[0].request_id == request.request_id
    assert sum(e.type == "permission.requested" for e in events) == 1
    assert sum(e.type == "tool.result" and e.data.ok for e in events) == 3


async def test_a_pending_approval_survives_the_worker_being_killed(
    e2e: Harness,
) -> None:
    running = await e2e.pool(approval="ask-exec")
    sid = await e2e.session()
    _, turn = await e2e.script(sid, BASH, {"say": "after approval"})
    request = await requested(e2e, sid)
    pid = running.pool.workers[0].pid
    os.kill(pid, signal.SIGKILL)
    # The pool frees the session but does not end the turn: it waits for a person.
    await e2e.wait_for(sid, lambda e: e.type == "worker.released")
    seq = await e2e.answer(sid, request.request_id, "allow_once")
    # The answer wakes the session on a fresh worker, which goes on.
    assigned = await e2e.wait_for(sid, lambda e: e.type == "worker.assigned", seq)
    assert assigned.data.pid != pid
    ended = await e2e.ended(sid, turn)
    assert ended.data.stop_reason == "end_turn"
    events = await e2e.events(sid)
    assert sum(e.type == "permission.requested" for e in events) == 1
    assert not any(
        e.type == "turn.ended" and e.data.stop_reason == "worker_lost" for e in events
    )
    result = await last_result(e2e, sid)
    assert result.ok
    assert result.output == "ran\n"


async def test_cancel_during_a_long_bash_ends_the_turn_and_kills_its_process_group(
    e2e: Harness, sandboxhost: Any
) -> None:
    await e2e.pool(approval="auto")
    sid = await e2e.session()
    long = "sleep 300 & echo $! > sleeper.pid; wait"
    _, turn = await e2e.script(sid, {"tool": "bash", "args": {"command": long}})
    running = await e2e.wait_for(
        sid, lambda e: e.type == "sandbox.state" and e.data.state == "running"
    )
    # The command runs once its pid file exists (seen on the sandbox host's disk).
    home = Path(sandboxhost.data_dir) / "sandboxes" / running.data.sandbox_id
    await e2e.until(lambda: any(p.stat().st_size for p in home.rglob("sleeper.pid")))
    await e2e.cancel(sid, turn)
    ended = await e2e.ended(sid, turn)
    assert ended.data.stop_reason == "cancelled"
    assert not (await last_result(e2e, sid)).ok
    check = "kill -0 $(cat sleeper.pid) 2>/dev/null && echo alive || echo gone"
    _, after = await e2e.script(sid, {"tool": "bash", "args": {"command": check}})
    await e2e.ended(sid, after)
    assert (await last_result(e2e, sid)).output == "gone\n"
