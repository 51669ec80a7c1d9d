"""The agent's other hands and forks (prints JSON; ``bench/turn.py --hands`` too).

Real processes (turn.py's ``Stack``: nats-server, gateway, pool, broker, sandbox
host). Scenarios:
- ``terminal_send_output``: one ``terminal`` call (``echo``) on a warm PTY,
  send → output with the prompt back, at the worker's adapter (no model turn).
- ``code_overhead``: a ``code`` program making 10 tool calls vs the same 10
  calls made one by one through the tool dispatcher (both from the worker side).
- ``lsp_diagnostics``: pylsp diagnostics of a file, cold (start + first answer
  in a fresh sandbox of the ``default`` template, as sessions get; and with the
  install the tool falls back to in a ``base`` one) and warm (the file edited,
  asked again).
- ``fork_1000_files``: ``POST /fork`` → 201 on a session whose workspace holds
  1,000 files (saved at the turn end), and a fork's first turn (sandbox built
  from the shared layers) against a new session's first turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from turn import SseReader, Stack, summary

from services.envd import EnvdClient, SandboxTools
from services.pool.hands import CodeArgs
from services.pool.toolbox import execute, parse_args
from tests.contract.envd.sandboxes import sandbox

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("write", {"path": "b/one.txt", "content": "one needle\n"}),
    ("write", {"path": "b/two.txt", "content": "two needle\n"}),
    ("write", {"path": "b/three.txt", "content": "three\n"}),
    ("grep", {"pattern": "needle", "path": "b"}),
    ("glob", {"pattern": "b/*.txt"}),
    ("read", {"path": "b/one.txt"}),
    ("read", {"path": "b/two.txt"}),
    ("read", {"path": "b/three.txt"}),
    ("ls", {"path": "b"}),
    ("bash", {"command": "wc -l b/*.txt"}),
]
PROGRAM = "\n".join(f"{tool}(**{args!r})" for tool, args in CALLS)
MAKE_FILES = 'mkdir -p w && for i in $(seq 1000); do echo "file $i" > w/f$i.txt; done'


async def terminal_send_output(tools: SandboxTools, n: int) -> dict[str, Any]:
    await tools.terminals.call("main", "true")  # start the shell
    samples = []
    for i in range(n):
        start = time.perf_counter()
        out = await tools.terminals.call("main", f"echo ping-{i}")
        samples.append(time.perf_counter() - start)
        assert f"ping-{i}" in out.output, out
    return summary(samples)


async def lsp_cold(tools: SandboxTools) -> float:
    """Start (installing first when the sandbox has no pylsp) + first answer."""
    await tools.write("lsp/mod.py", "import os\n\nprint(missing)\n")
    start = time.perf_counter()
    first = await tools.language_servers.query(
        "diagnostics", "/workspace/lsp/mod.py", None, None
    )
    cold = time.perf_counter() - start
    assert "undefined name" in first, first
    return cold


async def lsp_diagnostics(tools: SandboxTools, n: int) -> dict[str, Any]:
    """Cold: start + first diagnostics in a sandbox of the sessions' template
    (``default``: pylsp in the template); warm: an edited file's diagnostics
    from the running server."""
    cold = await lsp_cold(tools)
    samples = []
    for i in range(n):
        await tools.write("lsp/mod.py", f"import os\n\nprint(missing_{i})\n")
        start = time.perf_counter()
        found = await tools.language_servers.query(
            "diagnostics", "/workspace/lsp/mod.py", None, None
        )
        samples.append(time.perf_counter() - start)
        assert f"missing_{i}" in found, found
    return {"cold_first_s": round(cold, 3), "warm": summary(samples)}


async def lsp_cold_install(stack: Stack) -> float:
    """The fallback: a ``base`` sandbox, where the tool installs pylsp itself."""
    async with (
        sandbox(stack.host, "base") as ref,
        EnvdClient(ref.url, ref.sandbox_id, ref.access_token) as client,
    ):
        tools = SandboxTools(client)
        try:
            return await lsp_cold(tools)
        finally:
            await tools.language_servers.close()


async def code_overhead(tools: SandboxTools, n: int) -> dict[str, Any]:
    program, one_by_one = [], []
    for _ in range(n):
        start = time.perf_counter()
        for tool, args in CALLS:
            run = await execute(tools, parse_args(tool, args))
            assert run.outcome.ok, run.outcome
        one_by_one.append(time.perf_counter() - start)
        start = time.perf_counter()
        done = (await execute(tools, CodeArgs(program=PROGRAM))).outcome
        assert done.ok, done
        program.append(time.perf_counter() - start)
    p50 = summary(program)["p50_ms"] - summary(one_by_one)["p50_ms"]
    return {
        "calls": len(CALLS),
        "code_program": summary(program),
        "one_by_one": summary(one_by_one),
        "overhead_p50_ms": round(p50, 2),
    }


async def turn_time(stack: Stack, sid: str, steps: list[dict[str, Any]]) -> float:
    """Prompt → this turn's ``turn.ended`` at an SSE client (a fork's log holds
    copied turn ends: the stream starts after the current last seq)."""
    assert stack.http is not None
    after = await last_seq(stack, sid)
    url = stack.url(f"/v1/sessions/{sid}/events")
    headers = {"Last-Event-ID": str(after)}
    timeout = aiohttp.ClientTimeout(total=None)
    async with stack.http.get(url, headers=headers, timeout=timeout) as resp:
        sse = SseReader(resp)
        accepted = await stack.prompt(sid, json.dumps({"script": steps}))
        return await sse.until("turn.ended", timeout=300) - accepted


async def fork(stack: Stack, sid: str, at_seq: int) -> tuple[float, str]:
    assert stack.http is not None
    url = stack.url(f"/v1/sessions/{sid}/fork")
    start = time.perf_counter()
    async with stack.http.post(url, json={"at_seq": at_seq}) as resp:
        body = await resp.json()
        assert resp.status == 201, body
    return time.perf_counter() - start, str(body["session_id"])


async def forked_manifest(stack: Stack, fid: str) -> str | None:
    assert stack.http is not None
    url = stack.url(f"/v1/sessions/{fid}/events?follow=0")
    async with stack.http.get(url) as resp:
        body = await resp.text()
    for line in body.splitlines():
        if line.startswith("data:") and '"session.forked"' in line:
            data = json.loads(line[5:])["data"]
            return data.get("workspace_manifest")
    return None


async def fork_1000_files(stack: Stack, n: int) -> dict[str, Any]:
    sid = await stack.session()
    await turn_time(stack, sid, [{"tool": "bash", "args": {"command": MAKE_FILES}}])
    at_seq = 10_000
    async with asyncio.timeout(120):  # the turn-end save lands after turn.ended
        while True:
            at_seq = await last_seq(stack, sid)
            _, fid = await fork(stack, sid, at_seq)
            if await forked_manifest(stack, fid):
                break
            await asyncio.sleep(0.5)
    samples = [(await fork(stack, sid, at_seq))[0] for _ in range(n)]
    count = [{"tool": "bash", "args": {"command": "ls w | wc -l"}}]
    fork_first = [await turn_time(stack, (await fork(stack, sid, at_seq))[1], count)]
    new_first = [await turn_time(stack, await stack.session(), count)]
    return {
        "files": 1000,
        "fork_request": summary(samples),
        "fork_first_turn_s": round(fork_first[0], 3),
        "new_session_first_turn_s": round(new_first[0], 3),
    }


async def last_seq(stack: Stack, sid: str) -> int:
    assert stack.http is not None
    async with stack.http.get(stack.url(f"/v1/sessions/{sid}")) as resp:
        return int((await resp.json())["last_seq"])


async def run(stack: Stack, n: int) -> dict[str, Any]:
    """Every scenario on a started stack with a sandbox host and a pool."""
    out: dict[str, Any] = {}
    async with (
        sandbox(stack.host, "default") as ref,
        EnvdClient(ref.url, ref.sandbox_id, ref.access_token) as client,
    ):
        tools = SandboxTools(client)
        out["terminal_send_output"] = await terminal_send_output(tools, n)
        out["code_overhead"] = await code_overhead(tools, max(n // 5, 3))
        out["lsp_diagnostics"] = await lsp_diagnostics(tools, n)
        await tools.language_servers.close()
    out["lsp_diagnostics"]["cold_install_base_s"] = round(
        await lsp_cold_install(stack), 3
    )
    out["fork_1000_files"] = await fork_1000_files(stack, max(n // 5, 3))
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-hands-") as tmp:
        stack = Stack(Path(tmp), with_sandbox=True)
        await stack.start()
        try:
            stack.start_pool(workers=2, idle_s=600)
            return {"bench": "hands", **await run(stack, args.n)}
        finally:
            await stack.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=50, help="samples per scenario")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
