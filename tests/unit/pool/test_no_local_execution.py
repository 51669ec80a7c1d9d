"""A worker cannot execute anything locally: no such code path, no such setting."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from services.pool import toolbox as tools
from services.pool.__main__ import main
from services.pool.process import WORKER_ARGV
from services.pool.toolbox import ARGS, BashArgs, execute

POOL = Path(__file__).resolve().parents[3] / "services" / "pool"
PROCESS_APIS = {"subprocess", "os.system", "os.popen", "os.exec", "os.spawn", "pty"}


def imports_and_calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found.add(f"{node.value.id}.{node.attr}")
    return found


def test_no_module_of_the_pool_can_start_a_process_but_the_worker_spawner() -> None:
    offenders = {}
    for path in POOL.rglob("*.py"):
        used = {
            name
            for name in imports_and_calls(path)
            if any(name.startswith(api) for api in PROCESS_APIS)
            or name.startswith("asyncio.create_subprocess")
        }
        if used and path.name != "process.py":
            offenders[path.name] = used
    assert offenders == {}


def test_the_only_process_the_pool_starts_is_its_own_worker_module() -> None:
    assert WORKER_ARGV[1:] == ("-m", "services.pool.worker")
    source = (POOL / "process.py").read_text()
    assert source.count("create_subprocess_exec(") == 1
    assert "*WORKER_ARGV," in source


def test_tools_run_only_through_the_envd_adapter() -> None:
    assert set(ARGS) == {
        *(
            "read",
            "write",
            "edit",
            "ls",
            "glob",
            "grep",
            "bash",
            "terminal",
            "code",
            "lsp",
        ),
    }
    assert imports_and_calls(Path(tools.__file__)) & {"os", "shutil"} == set()

    class NoSandbox:
        """Anything that is not the envd adapter has no bash to offer."""

    with pytest.raises(AttributeError):
        asyncio.run(execute(NoSandbox(), BashArgs(command="true")))  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["local", "subprocess", "host"])
def test_a_local_tool_backend_setting_is_refused_with_exit_2(
    backend: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["--tool-backend", backend]) == 2
    assert "AGENTBUS_POOL_TOOL_BACKEND" in capsys.readouterr().err
    monkeypatch.setenv("AGENTBUS_POOL_TOOL_BACKEND", backend)
    assert main([]) == 2


def test_bad_settings_exit_2_naming_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTBUS_APPROVAL", "sometimes")
    assert main([]) == 2
    assert "AGENTBUS_APPROVAL" in capsys.readouterr().err
    monkeypatch.delenv("AGENTBUS_APPROVAL")
    assert main(["--workers", "0"]) == 2
