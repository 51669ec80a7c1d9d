"""``agentbus config``: every ``AGENTBUS_*`` variable, its default and who reads it.

The README's configuration table is this command's output (a test keeps them equal).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import msgspec

from services.cli import SETTINGS
from services.common.settings import env_name

SECRET_HINTS = ("password", "secret", "api_key", "device_secret")


def _default(cls: type[msgspec.Struct], field: str) -> str:
    info = {f.name: f for f in msgspec.structs.fields(cls)}[field]
    value: Any = info.default
    if value is msgspec.NODEFAULT and info.default_factory is not msgspec.NODEFAULT:
        value = info.default_factory()
    if any(h in field for h in SECRET_HINTS):
        return "(secret)" if value in (None, "") else "(set)"
    if value is None or value == "":
        return "—"
    return f"`{value}`"


def rows() -> list[tuple[str, str, str]]:
    """(variable, default, read by) for every settings field of this build."""
    table: dict[str, tuple[str, list[str]]] = {}
    for ref in SETTINGS:
        module, _, name = ref.partition(":")
        try:
            cls = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError:
            continue
        role = module.split(".")[-2] if module.startswith("services.") else "eventstore"
        for field in cls.__struct_fields__:
            var = env_name(field)
            default, roles = table.get(var, (_default(cls, field), []))
            table[var] = (default, [*roles, role])
    return [(var, d, ", ".join(r)) for var, (d, r) in sorted(table.items())]


def markdown() -> str:
    """The table as Markdown."""
    lines = ["| variable | default | read by |", "|---|---|---|"]
    lines += [f"| `{v}` | {d} | {r} |" for v, d, r in rows()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """Print the table."""
    if argv:
        print("usage: agentbus config", file=sys.stderr)
        return 2
    sys.stdout.write(markdown())
    return 0
