"""A small SSE reader for tests and the benchmark: parses id/event/data/comments."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp


@dataclass
class SseEvent:
    id: str | None
    event: str
    data: str
    comment: bool = False


async def read_event(resp: aiohttp.ClientResponse) -> SseEvent | None:
    """The next event or comment block; None at end of stream."""
    fields: dict[str, list[str]] = {}
    comment = False
    while True:
        line = await resp.content.readline()
        if not line:
            return None
        text = line.decode().rstrip("\n")
        if text == "":
            if "data" not in fields and "event" not in fields:
                fields.clear()  # e.g. the "retry:" block
            if fields or comment:
                return SseEvent(
                    id=fields.get("id", [None])[-1],
                    event=fields.get("event", ["message"])[-1],
                    data="\n".join(fields.get("data", [])),
                    comment=comment and not fields,
                )
            continue
        if text.startswith(":"):
            comment = True
            continue
        name, _, value = text.partition(":")
        fields.setdefault(name, []).append(
            value[1:] if value.startswith(" ") else value
        )
