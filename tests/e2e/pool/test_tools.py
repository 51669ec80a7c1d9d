"""Every tool, the demo script and approvals, through broker bind and envd."""

from __future__ import annotations

from schemas.events import Event, ToolCall, ToolResult
from tests.integration.pool.harness import Harness


def results(events: list[Event]) -> dict[str, ToolResult]:
    calls = {
        e.data.call_id: e.data.tool for e in events if isinstance(e.data, ToolCall)
    }
    out = {}
    for e in events:
        if isinstance(e.data, ToolResult):
            out[calls[e.data.call_id]] = e.data
    return out


async def test_the_demo_script_runs_the_reference_task_end_to_end(e2e: Harness) -> None:
    await e2e.pool()
    sid = await e2e.session()
    _, turn = await e2e.prompt(sid, "build me a calculator")
    ended = await e2e.ended(sid, turn, timeout=120)
    assert ended.data.stop_reason == "end_turn"
    events = await e2e.events(sid)
    calls = [e.data for e in events if isinstance(e.data, ToolCall)]
    tool_results = [e.data for e in events if isinstance(e.data, ToolResult)]
    assert [c.tool for c in calls] == [
        "ls", "write", "write", "read", "edit", "write",
        "grep", "glob", "bash", "bash", "read", "bash",
        "terminal", "code", "lsp",
    ]  # fmt: skip
    assert all(r.ok for r in tool_results), [r.error for r in tool_results]
    grep, glob = tool_results[6].output, tool_results[7].output
    assert "calc/ops.py" in grep
    assert "ValueError" in grep
    assert "calc/ops.py" in glob
    assert "tests/test_ops.py" in glob
    assert "safe_div" in tool_results[11].output
    terminal, code, lsp = (r.output for r in tool_results[12:])
    assert "5 42" in terminal
    assert "- `add`\n- `mul`\n- `safe_div`" in code  # grep'd, written, read back
    assert lsp == "(no problems)"
    states = [e.data.state for e in events if e.type == "sandbox.state"]
    assert "running" in states


async def test_a_scripted_session_exercises_every_tool(e2e: Harness) -> None:
    await e2e.pool()
    sid = await e2e.session()
    _, turn = await e2e.script(
        sid,
        {
            "tool": "write",
            "args": {"path": "a/notes.txt", "content": "one\ntwo\nthree\n"},
        },
        {"tool": "read", "args": {"path": "a/notes.txt", "offset": 2, "limit": 1}},
        {"tool": "edit", "args": {"path": "a/notes.txt", "old": "two", "new": "TWO"}},
        {"tool": "ls", "args": {"path": "a"}},
        {"tool": "glob", "args": {"pattern": "**/*.txt"}},
        {"tool": "grep", "args": {"pattern": "TWO", "path": "a"}},
        {"tool": "bash", "args": {"command": "cat a/notes.txt; echo done >&2"}},
        {"say": "all tools ran"},
    )
    assert (await e2e.ended(sid, turn, timeout=60)).data.stop_reason == "end_turn"
    got = results(await e2e.events(sid))
    assert all(r.ok for r in got.values()), {k: r.error for k, r in got.items()}
    assert got["read"].output.startswith("two\n")
    assert "[lines 2-2 of 3]" in got["read"].output
    assert "notes.txt" in got["ls"].output
    assert got["glob"].output == "a/notes.txt"
    assert "TWO" in got["grep"].output
    assert got["bash"].output == "one\nTWO\nthree\ndone\n"
    assert got["bash"].exit_code == 0


async def test_an_edit_of_a_file_changed_since_it_was_read_is_refused(
    e2e: Harness,
) -> None:
    await e2e.pool()
    sid = await e2e.session()
    _, turn = await e2e.script(
        sid,
        {"tool": "write", "args": {"path": "f.txt", "content": "v1"}},
        {"tool": "read", "args": {"path": "f.txt"}},
        {"tool": "bash", "args": {"command": "echo v2 > f.txt"}},
        {"tool": "edit", "args": {"path": "f.txt", "old": "v2", "new": "v3"}},
    )
    await e2e.ended(sid, turn, timeout=60)
    edit = results(await e2e.events(sid))["edit"]
    assert not edit.ok
    assert "changed since it was last read" in (edit.error or "")


async def test_large_command_output_is_bounded_and_names_the_spill_file(
    e2e: Harness,
) -> None:
    await e2e.pool()
    sid = await e2e.session()
    command = "for i in $(seq 1 20000); do echo line-$i; done"
    _, turn = await e2e.script(sid, {"tool": "bash", "args": {"command": command}})
    await e2e.ended(sid, turn, timeout=60)
    bash = results(await e2e.events(sid))["bash"]
    assert bash.truncated
    assert bash.spill_path
    assert bash.spill_path in bash.output
    assert len(bash.output) < 40_000
    assert "line-20000" in bash.output
