"""The README's configuration table is exactly what `agentbus config` prints."""

from __future__ import annotations

from pathlib import Path

from services.config_cli import markdown, rows

README = Path(__file__).resolve().parents[3] / "README.md"


def test_readme_lists_every_variable_with_its_current_default():
    text = README.read_text()
    assert markdown() in text, "run `agentbus config` and paste it into README.md"


def test_every_service_contributes_variables():
    readers = {r for _, _, who in rows() for r in who.split(", ")}
    assert {
        "gateway",
        "pool",
        "broker",
        "sandboxhost",
        "eventstore",
        "launcher",
    } <= readers
