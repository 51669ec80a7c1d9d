"""The terminal tool end to end: state across turns and a worker SIGKILL."""

from __future__ import annotations

import os
import signal

from schemas.events import ToolCall, ToolResult, ToolUpdate
from services.common.natsserver import free_port
from tests.integration.pool.harness import Harness


def terminal(text: str, **more: object) -> dict[str, object]:
    return {"tool": "terminal", "args": {"input": text, **more}}


async def test_terminal_state_survives_turns_and_a_killed_worker(e2e: Harness) -> None:
    """cd, export and a background server from turn 1 are there in turn 2,
    after the worker that started them was SIGKILLed."""
    running = await e2e.pool(pool_workers=1)
    sid = await e2e.session()
    port = free_port()
    server = f"python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &"
    ready = f"until curl -s -o /dev/null 127.0.0.1:{port}; do sleep 0.1; done"
    _, first = await e2e.script(
        sid,
        terminal("mkdir -p site && cd site && export GREETING=hello-there"),
        terminal("echo served-page > index.html && " + server),
        terminal(ready, wait_ms=20_000),
    )
    assert (await e2e.ended(sid, first, timeout=60)).data.stop_reason == "end_turn"
    worker = await e2e.wait_for(sid, lambda e: e.type == "worker.assigned")
    os.kill(worker.data.pid, signal.SIGKILL)
    await e2e.until(
        lambda: worker.data.pid not in [w.pid for w in running.pool.workers]
    )
    _, second = await e2e.script(
        sid, terminal(f"echo $GREETING in $(pwd); curl -s 127.0.0.1:{port}/")
    )
    assert (await e2e.ended(sid, second, timeout=60)).data.stop_reason == "end_turn"
    events = await e2e.events(sid)
    pids = {e.data.pid for e in events if e.type == "worker.assigned"}
    assert len(pids) == 2
    results = [e.data for e in events if isinstance(e.data, ToolResult)]
    assert all(r.ok for r in results), [r.error for r in results]
    assert "new shell started" in results[0].output
    last = results[-1].output
    assert "new shell" not in last
    assert "hello-there in /workspace/site" in last
    assert "served-page" in last
    assert "\x1b" not in last
    calls = {e.data.call_id for e in events if isinstance(e.data, ToolCall)}
    live = [
        e.data.text
        for e in events
        if isinstance(e.data, ToolUpdate) and e.data.stream == "stdout"
    ]
    assert len(calls) == 4
    assert any("served-page" in text for text in live)
