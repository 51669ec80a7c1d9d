"""JSON Schema of the event stream, generated from the Structs (for App developers)."""

from __future__ import annotations

from typing import Any

import msgspec

from schemas.events import EVENT_TYPES


def event_schema() -> dict[str, Any]:
    """A JSON Schema: one envelope variant per event type, discriminated by ``type``."""
    payloads = list(EVENT_TYPES.values())
    _, components = msgspec.json.schema_components(
        payloads, ref_template="#/$defs/{name}"
    )
    variants = []
    for name, cls in EVENT_TYPES.items():
        variants.append(
            {
                "title": name,
                "type": "object",
                "required": ["session_id", "seq", "id", "type", "ts", "actor", "data"],
                "properties": {
                    "session_id": {"type": "string"},
                    "seq": {"type": "integer", "minimum": 1},
                    "id": {"type": "string"},
                    "type": {"const": name},
                    "ts": {"type": "string", "format": "date-time"},
                    "actor": {
                        "type": "string",
                        "pattern": "^(device|worker|pool):|^broker$|^gateway$",
                    },
                    "data": {"$ref": f"#/$defs/{cls.__name__}"},
                    "prev": {"type": ["string", "null"]},
                },
            }
        )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "agentbus session event",
        "oneOf": variants,
        "$defs": components,
    }


def schema_json() -> bytes:
    """The schema as pretty JSON."""
    return msgspec.json.format(msgspec.json.encode(event_schema()), indent=2)
