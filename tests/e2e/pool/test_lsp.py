"""The lsp tool driven by the scripted model, through broker bind and envd."""

from __future__ import annotations

from schemas.events import ToolResult
from tests.integration.pool.harness import Harness

LIB = "def area(width, height):\n    return width * height\n"
MAIN = "from lib import area\n\nprint(area(2, 3))\nprint(undefined_name)\n"


async def test_diagnostics_and_definition_across_two_files(e2e: Harness) -> None:
    await e2e.pool()
    sid = await e2e.session()
    _, turn = await e2e.script(
        sid,
        {"tool": "write", "args": {"path": "lib.py", "content": LIB}},
        {"tool": "write", "args": {"path": "main.py", "content": MAIN}},
        {"tool": "lsp", "args": {"action": "diagnostics", "path": "main.py"}},
        {
            "tool": "lsp",
            "args": {"action": "definition", "path": "main.py", "line": 3, "column": 7},
        },
    )
    ended = await e2e.ended(sid, turn, timeout=300)
    assert ended.data.stop_reason == "end_turn"
    events = await e2e.events(sid)
    results = [e.data for e in events if isinstance(e.data, ToolResult)]
    assert all(r.ok for r in results), [r.error for r in results]
    assert "main.py:4:7: error: undefined name 'undefined_name'" in results[2].output
    assert results[3].output == "lib.py:1:5"
