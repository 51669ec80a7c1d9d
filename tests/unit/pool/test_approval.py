"""The approval policy and the session's standing rules."""

from __future__ import annotations

import pytest

from services.pool.approval import OPTIONS, allows, decide, standing


@pytest.mark.parametrize(
    ("policy", "tool", "expected"),
    [
        ("auto", "bash", "allow"),
        ("auto", "write", "allow"),
        ("ask-exec", "bash", "ask"),
        ("ask-exec", "write", "allow"),
        ("ask-exec", "read", "allow"),
        ("ask-all", "read", "ask"),
        ("ask-all", "bash", "ask"),
    ],
)
def test_the_policy_decides_which_calls_need_a_person(
    policy: str, tool: str, expected: str
) -> None:
    assert decide(policy, tool, {}) == expected  # type: ignore[arg-type]


def test_a_standing_rule_of_the_session_wins_over_the_policy() -> None:
    assert decide("ask-all", "bash", {"bash": "allow"}) == "allow"
    assert decide("auto", "bash", {"bash": "reject"}) == "reject"
    assert decide("ask-all", "read", {"bash": "allow"}) == "ask"


def test_always_answers_become_rules_once_answers_do_not() -> None:
    assert standing("allow_always") == "allow"
    assert standing("reject_always") == "reject"
    assert standing("allow_once") is None
    assert standing("reject_once") is None
    assert allows("allow_once")
    assert not allows("reject_always")
    assert [o.kind for o in OPTIONS] == [
        "allow_once", "allow_always", "reject_once", "reject_always",
    ]  # fmt: skip
