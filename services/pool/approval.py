"""Which tool calls need a person: the pool's policy plus the session's rules."""

from __future__ import annotations

from typing import Literal

from schemas.events import OptionKind, PermissionOption
from services.pool.settings import Approval

Decision = Literal["allow", "reject", "ask"]

# Tools that execute code in the sandbox (``ask-exec`` asks for these).
EXEC_TOOLS = frozenset({"bash", "terminal", "code"})

OPTIONS = [
    PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once"),
    PermissionOption(
        option_id="allow_always", name="Always allow", kind="allow_always"
    ),
    PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
    PermissionOption(
        option_id="reject_always", name="Always reject", kind="reject_always"
    ),
]


def decide(policy: Approval, tool: str, rules: dict[str, str]) -> Decision:
    """A session's standing rule for the tool wins; else the pool's policy."""
    rule = rules.get(tool)
    if rule == "allow":
        return "allow"
    if rule == "reject":
        return "reject"
    if policy == "auto":
        return "allow"
    if policy == "ask-all" or tool in EXEC_TOOLS:
        return "ask"
    return "allow"


def allows(option: OptionKind) -> bool:
    """The answer lets the call run."""
    return option in ("allow_once", "allow_always")


def standing(option: OptionKind) -> Literal["allow", "reject"] | None:
    """The session-wide rule an ``*_always`` answer creates, if any."""
    if option == "allow_always":
        return "allow"
    if option == "reject_always":
        return "reject"
    return None
