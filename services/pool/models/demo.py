"""The built-in demo: the 12-step reference coding task of design §5, narrated."""

from __future__ import annotations

from typing import Any

OPS = """def add(a, b):
    return a + b


def mul(a, b):
    return a * b


def safe_div(a, b):
    if b == 0:
        return None
    return a / b
"""

TESTS = """import pytest

from calc.ops import add, mul, safe_div


def test_ops():
    assert add(2, 3) == 5
    assert mul(2, 3) == 6
    with pytest.raises(ValueError):
        safe_div(1, 0)
"""


def _tool(name: str, **args: Any) -> dict[str, Any]:
    return {"tool": name, "args": args}


DEMO_SCRIPT: list[dict[str, Any]] = [
    {"think": "The task: a small calc package with tests. Look around first."},
    {"say": "Let me look at the workspace first."},
    _tool("ls", path="/workspace"),
    {"say": "I'll create the calc package."},
    _tool("write", path="calc/__init__.py", content=""),
    _tool("write", path="calc/ops.py", content=OPS),
    {"say": "Reading it back to check."},
    _tool("read", path="calc/ops.py"),
    {"think": "safe_div should raise on zero, not return None."},
    {"say": "safe_div should raise ValueError on a zero divisor."},
    _tool(
        "edit",
        path="calc/ops.py",
        old="        return None",
        new='        raise ValueError("division by zero")',
    ),
    {"say": "Now a test for the three functions."},
    _tool("write", path="tests/test_ops.py", content=TESTS),
    _tool("grep", pattern="ValueError", path="calc"),
    _tool("glob", pattern="**/*.py"),
    {"say": "Checking that the module imports."},
    _tool("bash", command="python3 -c 'import calc.ops'"),
    _tool("bash", command="ls -la calc"),
    _tool("read", path="tests/test_ops.py"),
    _tool("bash", command="grep -rn safe_div ."),
    {
        "say": "Done: calc/ops.py has add, mul and safe_div (which raises "
        "ValueError on zero), and tests/test_ops.py covers them."
    },
]
