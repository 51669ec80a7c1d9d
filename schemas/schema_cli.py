"""``agentbus schema``: print the JSON Schema of the events."""

from __future__ import annotations

import sys

from schemas.jsonschema import schema_json


def main(argv: list[str]) -> int:
    """Write the schema to stdout."""
    if argv:
        print("usage: agentbus schema", file=sys.stderr)
        return 2
    sys.stdout.buffer.write(schema_json() + b"\n")
    return 0
