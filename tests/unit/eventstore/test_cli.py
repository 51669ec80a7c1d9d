"""``agentbus projector`` / ``agentbus audit``: bad configuration exits 2, naming it."""

from __future__ import annotations

import pytest

from eventstore import audit_cli, projector_cli
from services.cli import available


def test_both_commands_are_offered_by_the_agentbus_cli() -> None:
    commands = available()
    assert commands["projector"][0] == "eventstore.projector_cli"
    assert commands["audit"][0] == "eventstore.audit_cli"


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
