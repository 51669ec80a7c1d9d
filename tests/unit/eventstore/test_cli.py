"""``agentbus projector`` / ``agentbus audit``: bad configuration exits 2, naming it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from services import audit_cli
from services.cli import available
from services.projector import __main__ as projector_cli


def test_both_commands_are_offered_by_the_agentbus_cli() -> None:
    commands = available()
    assert commands["projector"][0] == "services.projector.__main__"
    assert commands["audit"][0] == "services.audit_cli"


def test_projector_with_a_bad_variable_exits_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTBUS_PROJECTOR_BATCH", "many")
    assert projector_cli.main(["--db", "/nonexistent/p.db"]) == 2
    assert "AGENTBUS_PROJECTOR_BATCH" in capsys.readouterr().err


def test_audit_with_a_bad_variable_exits_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTBUS_LOG_MAX_MSGS", "lots")
    assert audit_cli.main(["s_x"]) == 2
    assert "AGENTBUS_LOG_MAX_MSGS" in capsys.readouterr().err


def test_audit_of_a_missing_sqlite_file_exits_2(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert audit_cli.main(["s_x", "--db", f"{tmp_path}/none.db"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_eventstore_library_imports_no_service_code() -> None:
    root = Path(__file__).resolve().parents[3] / "eventstore"
    offenders = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}" for n in names if n.split(".")[0] == "services"
            ]
    assert len(list(root.glob("*.py"))) > 5
    assert offenders == []
