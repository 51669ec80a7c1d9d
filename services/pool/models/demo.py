"""The built-in demo: the 12-step reference coding task of design §5, narrated.

Then the agent's other hands, once each: the functions tried in the
persistent terminal, a ``code`` program that greps the package and writes its
API list, and the language server's diagnostics on the edited module.
"""

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


# Runs in the sandbox; read/write/grep are the same tools, called as functions.
API_PROGRAM = """defs = grep(r"^def ", "calc").splitlines()
names = [d.split(":", 2)[2][4:].split("(")[0] for d in defs]
write("API.md", "# calc\\n\\n" + "".join(f"- `{n}`\\n" for n in names))
print(read("API.md"))
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
    {"say": "Trying the functions in a terminal (it stays open between turns)."},
    _tool(
        "terminal",
        input="python3 -c 'from calc.ops import add, mul; print(add(2, 3), mul(6, 7))'",
    ),
    {"say": "A small program lists the package's functions into API.md."},
    _tool("code", program=API_PROGRAM),
    {"say": "And the language server's check of the edited module."},
    _tool("lsp", action="diagnostics", path="calc/ops.py"),
    {
        "say": "Done: calc/ops.py has add, mul and safe_div (which raises "
        "ValueError on zero), tests/test_ops.py covers them, API.md lists "
        "them, and the language server reports no problems."
    },
]
