"""Reusable encoders/decoders; one typed Decoder per payload type."""

from __future__ import annotations

from typing import Any

import msgspec

from schemas.events import EVENT_TYPES, Event, GenericData, Payload


class EventDecodeError(ValueError):
    """An event is malformed; ``path`` names the field at fault (``$.data.text``)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class _RawEnvelope(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    seq: int
    id: str
    type: str
    ts: str
    actor: str
    data: msgspec.Raw
    prev: str | None = None


_ENCODER = msgspec.json.Encoder()
_ENVELOPE = msgspec.json.Decoder(_RawEnvelope)
_PAYLOADS: dict[str, msgspec.json.Decoder[Any]] = {
    name: msgspec.json.Decoder(cls) for name, cls in EVENT_TYPES.items()
}


def encode(obj: Any) -> bytes:
    """JSON-encode any Struct or plain value."""
    return _ENCODER.encode(obj)


def encode_event(event: Event) -> bytes:
    """Encode an envelope; a GenericData payload is written back byte-exact."""
    if isinstance(event.data, GenericData):
        event = msgspec.structs.replace(event, data=event.data.raw)
    return _ENCODER.encode(event)


def decode_payload(event_type: str, data: bytes | msgspec.Raw) -> Payload | GenericData:
    """Decode one payload by type; unknown types become GenericData."""
    decoder = _PAYLOADS.get(event_type)
    if decoder is None:
        return GenericData(msgspec.Raw(bytes(data)))
    try:
        payload: Payload = decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise _with_prefix(exc, "$.data") from exc
    except msgspec.DecodeError as exc:
        raise EventDecodeError(f"malformed JSON: {exc}", "$.data") from exc
    return payload


def decode_event(raw: bytes) -> Event:
    """Decode a stored event, validating the envelope and its typed payload."""
    try:
        env = _ENVELOPE.decode(raw)
    except msgspec.ValidationError as exc:
        raise _with_prefix(exc, "$") from exc
    except msgspec.DecodeError as exc:
        raise EventDecodeError(f"malformed JSON: {exc}", "$") from exc
    return Event(
        session_id=env.session_id,
        seq=env.seq,
        id=env.id,
        type=env.type,
        ts=env.ts,
        actor=env.actor,
        data=decode_payload(env.type, env.data),
        prev=env.prev,
    )


def _with_prefix(exc: msgspec.ValidationError, root: str) -> EventDecodeError:
    # msgspec reports "... - at `$.x`"; re-root the path under ``root``.
    text = str(exc)
    path = root
    if "- at `$" in text:
        head, _, tail = text.partition("- at `$")
        path = root + tail.rstrip("`")
        text = f"{head}- at `{path}`"
    return EventDecodeError(text, path)
