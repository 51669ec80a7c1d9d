"""The code tool end to end: a program in the sandbox calling the tools back."""

from __future__ import annotations

from schemas.events import ToolResult, ToolUpdate
from tests.integration.pool.harness import Harness

PROGRAM = """
for name in ("a", "b", "c"):
    write(f"notes/{name}.txt", f"{name}: needle {name.upper()}\\nplain\\n")
print(grep("needle", "notes"), end="")
print(sorted(glob("notes/*.txt").split()))
try:
    edit("notes/a.txt", "missing", "x")
except ToolError as exc:
    print("refused:", exc)
print(bash("cat notes/b.txt | wc -l").strip())
"""


async def test_a_program_writes_three_files_and_greps_them(e2e: Harness) -> None:
    await e2e.pool()
    sid = await e2e.session()
    _, turn = await e2e.script(
        sid,
        {"tool": "code", "args": {"program": PROGRAM}},
        {"tool": "bash", "args": {"command": "cat notes/c.txt"}},
    )
    assert (await e2e.ended(sid, turn, timeout=60)).data.stop_reason == "end_turn"
    events = await e2e.events(sid)
    code, bash = [e.data for e in events if isinstance(e.data, ToolResult)]
    assert code.ok, (code.error, code.output)
    lines = code.output.splitlines()
    assert sorted(lines[:3]) == [
        "notes/a.txt:1:a: needle A",
        "notes/b.txt:1:b: needle B",
        "notes/c.txt:1:c: needle C",
    ]
    assert lines[3] == "['notes/a.txt', 'notes/b.txt', 'notes/c.txt']"
    assert lines[4].startswith("refused: ")
    assert "found 0" in lines[4] or "0 times" in lines[4] or "not found" in lines[4]
    assert lines[5] == "2"
    assert bash.output == "c: needle C\nplain\n"
    status = [
        e.data.text
        for e in events
        if isinstance(e.data, ToolUpdate) and e.data.stream == "status"
    ]
    joined = "".join(t for t in status if t != "running")  # coalesced updates
    inner = [line.split(" ", 1)[0] for line in joined.splitlines()]
    assert inner == ["write", "write", "write", "grep", "glob", "edit", "bash"]


async def test_a_failing_program_reports_its_traceback(e2e: Harness) -> None:
    await e2e.pool()
    sid = await e2e.session()
    program = "print('before')\nread('no/such/file')\n"
    _, turn = await e2e.script(sid, {"tool": "code", "args": {"program": program}})
    await e2e.ended(sid, turn, timeout=60)
    events = await e2e.events(sid)
    (result,) = [e.data for e in events if isinstance(e.data, ToolResult)]
    assert not result.ok
    assert result.error == "the program exited with 1"
    assert result.output.startswith("before\n")
    assert "ToolError" in result.output
    assert "does not exist" in result.output


async def test_cancel_kills_a_running_program(e2e: Harness) -> None:
    await e2e.pool(approval="auto")
    sid = await e2e.session()
    program = (
        "import os, time\n"
        "write('program.pid', str(os.getpid()))\n"
        "print('started', flush=True)\n"
        "time.sleep(300)\n"
    )
    _, turn = await e2e.script(sid, {"tool": "code", "args": {"program": program}})
    # The pid file is written once the program printed.
    await e2e.wait_for(
        sid,
        lambda e: isinstance(e.data, ToolUpdate) and "started" in e.data.text,
    )
    await e2e.cancel(sid, turn)
    ended = await e2e.ended(sid, turn)
    assert ended.data.stop_reason == "cancelled"
    check = "kill -0 $(cat program.pid) 2>/dev/null && echo alive || echo gone"
    _, after = await e2e.script(sid, {"tool": "bash", "args": {"command": check}})
    await e2e.ended(sid, after)
    events = await e2e.events(sid)
    results = [e.data for e in events if isinstance(e.data, ToolResult)]
    assert results[-1].output == "gone\n"
