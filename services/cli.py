"""``agentbus`` command line: one sub-command per process role and tool.

Each command lives in its own module as ``main(argv) -> int``; a command whose
module is not present in this build is not offered (no stubs).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable

# The settings registry lives with the loader; re-exported for existing users.
from services.common.settings import SETTINGS, known_env_names

__all__ = ["COMMANDS", "SETTINGS", "available", "known_env_names", "main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("services.launcher.up", "start everything on one machine"),
    "status": ("services.launcher.status", "what `agentbus up` runs, and how it is"),
    "token": ("services.gateway.token_cli", "print a device token"),
    "chat": ("services.chat.__main__", "terminal client of a session"),
    "gateway": ("services.gateway.__main__", "the App API and SSE bridge"),
    "pool": ("services.pool.__main__", "warm agent workers"),
    "broker": ("services.broker.__main__", "sandbox lifecycle owner"),
    "sandboxhost": ("services.sandboxhost.__main__", "local E2B-compatible sandboxes"),
    "projector": ("services.projector.__main__", "copy session logs into SQLite"),
    "notifier": ("services.notifier.__main__", "push events to device webhooks"),
    "audit": ("services.audit_cli", "verify and print one session log"),
    "schema": ("schemas.schema_cli", "print the JSON Schema of the events"),
    "config": ("services.config_cli", "list every AGENTBUS_* variable"),
}


def available() -> dict[str, tuple[str, str]]:
    """The commands whose modules exist in this build."""
    found = {}
    for name, (module, summary) in COMMANDS.items():
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is not None:
            found[name] = (module, summary)
    return found


def _usage(commands: dict[str, tuple[str, str]]) -> str:
    lines = ["usage: agentbus COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name:<12} {summary}" for name, (_, summary) in commands.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a sub-command."""
    args = sys.argv[1:] if argv is None else argv
    commands = available()
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage(commands))
        return 0
    name = args[0]
    if name not in commands:
        print(
            f"agentbus: unknown command {name!r}\n\n{_usage(commands)}", file=sys.stderr
        )
        return 2
    module = importlib.import_module(commands[name][0])
    entry: Callable[[list[str]], int] = module.main
    return entry(args[1:])


if __name__ == "__main__":
    sys.exit(main())
