"""Connect-JSON wire format: envelopes, proto3-JSON messages, error bodies."""

from __future__ import annotations

import struct
from typing import Any

import msgspec

from schemas.envd import (
    ConnectErrorBody,
    DataEvent,
    EndEvent,
    EndOfStream,
    EntryInfo,
    EntryResponse,
    ListDirResponse,
    ProcessEvent,
    ProcessStreamMessage,
    StartEvent,
)
from services.envd.errors import HTTP_TO_CODE, EnvdError, EnvdProtocolError, error_for

__all__ = [
    "FLAG_COMPRESSED",
    "FLAG_END_STREAM",
    "MAX_MESSAGE",
    "DataEvent",
    "EndEvent",
    "EntryInfo",
    "EntryResponse",
    "EnvelopeDecoder",
    "ListDirResponse",
    "ProcessEvent",
    "StartEvent",
    "UploadedFile",
    "decode_as",
    "decode_process_event",
    "encode_json",
    "end_stream_error",
    "envelope",
    "http_error",
]

FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
_HEADER = struct.Struct(">BI")
MAX_MESSAGE = 64 * 1024 * 1024


class UploadedFile(msgspec.Struct):
    """One entry of the ``POST /files`` answer."""

    path: str
    name: str = ""
    type: str = "file"


_event_decoder = msgspec.json.Decoder(ProcessStreamMessage)
_end_decoder = msgspec.json.Decoder(EndOfStream)
_error_decoder = msgspec.json.Decoder(ConnectErrorBody)
_encoder = msgspec.json.Encoder()


def encode_json(message: Any) -> bytes:
    """Encode a request message (dict or Struct) as JSON bytes."""
    return _encoder.encode(message)


def envelope(payload: bytes, flags: int = 0) -> bytes:
    """Frame one message: flag byte, big-endian uint32 length, payload."""
    return _HEADER.pack(flags, len(payload)) + payload


class EnvelopeDecoder:
    """Split a byte stream into (flags, payload) envelopes across any chunking."""

    def __init__(self, op: str) -> None:
        self._op = op
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        """Add bytes; return every envelope completed by them."""
        self._buf += chunk
        out: list[tuple[int, bytes]] = []
        while len(self._buf) >= _HEADER.size:
            flags, length = _HEADER.unpack_from(self._buf)
            if length > MAX_MESSAGE:
                raise EnvdProtocolError(self._op, f"envelope of {length} bytes")
            if flags & FLAG_COMPRESSED:
                raise EnvdProtocolError(self._op, "compressed envelope not negotiated")
            end = _HEADER.size + length
            if len(self._buf) < end:
                break
            out.append((flags, bytes(self._buf[_HEADER.size : end])))
            del self._buf[:end]
        return out

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet form a whole envelope."""
        return len(self._buf)


def decode_process_event(op: str, payload: bytes) -> ProcessEvent:
    """Decode one Start/Connect stream message."""
    try:
        msg = _event_decoder.decode(payload)
    except msgspec.DecodeError as e:
        raise EnvdProtocolError(op, f"bad stream message: {e}") from e
    return msg.event or ProcessEvent()


def end_stream_error(op: str, payload: bytes) -> EnvdError | None:
    """The error carried by an end-of-stream envelope, or None on success."""
    try:
        end = _end_decoder.decode(payload)
    except msgspec.DecodeError as e:
        raise EnvdProtocolError(op, f"bad end-of-stream: {e}") from e
    if end.error is None:
        return None
    code = end.error.code if isinstance(end.error.code, str) else "unknown"
    return error_for(op, code, end.error.message)


def http_error(op: str, status: int, body: bytes) -> EnvdError:
    """Map a non-2xx answer (Connect JSON, envd plain JSON or text) to an error."""
    code = HTTP_TO_CODE.get(status, "unknown")
    message = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    try:
        parsed = _error_decoder.decode(body)
    except msgspec.DecodeError:
        return error_for(op, code, message)
    if isinstance(parsed.code, str) and parsed.code:
        code = parsed.code
    return error_for(op, code, parsed.message or message)


def decode_as(op: str, decoder: msgspec.json.Decoder[Any], body: bytes) -> Any:
    """Decode a unary response body, as a protocol error if it does not fit."""
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as e:
        raise EnvdProtocolError(op, f"bad response: {e}") from e
