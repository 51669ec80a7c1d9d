"""The model key never reaches a sandbox: its environment, processes and files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from schemas.events import ToolResult
from tests.integration.pool.harness import Harness
from tests.support.fake_openai import (
    FakeOpenAI,
    Stream,
    answer,
    chunk,
    tool_chunks,
)

CANARY = "sk-canary-7f3a9c1e55d04b2b"
# The script names the key only in two halves, so its own argv cannot match.
LOOK = (
    "env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
    "tr '\\0' '\\n' < $f; done 2>/dev/null; "
    f"A={CANARY[:8]}; B={CANARY[8:]}; "
    'grep -rIl "$A$B" /workspace /tmp /home /root /etc 2>/dev/null; '
    "echo scanned"
)


async def test_the_model_key_is_in_no_sandbox_env_process_or_file(
    e2e: Harness, fake_openai: FakeOpenAI, sandboxhost: Any
) -> None:
    call = tool_chunks(0, "call_look", "bash", json.dumps({"command": LOOK}))
    fake_openai.push(Stream([*call, chunk({}, "tool_calls")]), answer("looked"))
    pool = e2e.pool_process(
        model="openai",
        model_base_url=fake_openai.url,
        model_api_key=CANARY,
        approval="auto",
    )
    sid = await e2e.session()
    _, turn = await e2e.prompt(sid, "look around")
    assert (await e2e.ended(sid, turn, timeout=60)).data.stop_reason == "end_turn"
    assert fake_openai.headers[0]["Authorization"] == f"Bearer {CANARY}"
    events = await e2e.events(sid)
    result = next(e.data for e in events if isinstance(e.data, ToolResult))
    assert result.ok
    assert result.output.endswith("scanned\n")
    assert "PATH=" in result.output
    assert CANARY not in result.output
    sandbox_id = next(e.data.sandbox_id for e in events if e.type == "sandbox.state")
    home = Path(sandboxhost.data_dir) / "sandboxes" / str(sandbox_id)
    for path in home.rglob("*"):
        if path.is_file() and path.stat().st_size < 10_000_000:
            assert CANARY.encode() not in path.read_bytes(), path
    assert pool.proc is not None
    assert pool.proc.poll() is None
