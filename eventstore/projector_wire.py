"""The projector's range-read protocol over NATS request/reply (``projector.read``)."""

from __future__ import annotations

import msgspec


class ProjectorRange(msgspec.Struct, frozen=True):
    """Reply of the projector to a range read."""

    events: list[msgspec.Raw] = []
    last: int = 0
    error: str | None = None


class ProjectorRead(msgspec.Struct, frozen=True):
    """Request to the projector: events of a session after a seq."""

    session_id: str
    after: int
    limit: int = 1000


class SeqType(msgspec.Struct, frozen=True):
    """The two envelope fields a reader needs from a stored event."""

    seq: int
    type: str


RANGE_DECODER = msgspec.json.Decoder(ProjectorRange)
SEQTYPE_DECODER = msgspec.json.Decoder(SeqType)
