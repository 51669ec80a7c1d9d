"""Connect-JSON wire format: envelopes, proto3-JSON messages, error bodies."""

from __future__ import annotations

import struct
from typing import Any

import msgspec

from services.envd.errors import HTTP_TO_CODE, EnvdError, EnvdProtocolError, error_for

FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
_HEADER = struct.Struct(">BI")
MAX_MESSAGE = 64 * 1024 * 1024


class _Msg(msgspec.Struct, rename="camel", omit_defaults=True):
    """Base of proto3-JSON messages: camelCase keys, defaults omitted."""


class StartEvent(_Msg):
    """``start``: the process is running with this pid."""

    pid: int = 0


class DataEvent(_Msg):
    """``data``: one chunk of output; bytes arrive base64 and decode exactly."""

    stdout: bytes | None = None
    stderr: bytes | None = None
    pty: bytes | None = None


class EndEvent(_Msg):
    """``end``: the process finished (the completion of a run)."""

    exit_code: int = 0
    exited: bool = False
    status: str = ""
    error: str | None = None


class ProcessEvent(_Msg):
    """One event of a Start/Connect stream (a oneof)."""

    start: StartEvent | None = None
    data: DataEvent | None = None
    end: EndEvent | None = None
    keepalive: dict[str, Any] | None = None


class ProcessStreamMessage(_Msg):
    """``StartResponse`` / ``ConnectResponse``."""

    event: ProcessEvent | None = None


class EntryInfo(_Msg):
    """A filesystem entry as envd describes it."""

    name: str = ""
    type: str | int = "FILE_TYPE_UNSPECIFIED"
    path: str = ""
    size: int | str = 0
    mode: int = 0
    permissions: str = ""
    owner: str = ""
    group: str = ""
    modified_time: str | None = None
    symlink_target: str | None = None
    metadata: dict[str, str] | None = None
    is_symlink: bool = False

    @property
    def kind(self) -> str:
        """``file``, ``dir``, ``symlink`` or ``unknown`` (a symlink: its target's)."""
        names = {1: "file", 2: "dir", 3: "symlink"}
        if isinstance(self.type, int):
            return names.get(self.type, "unknown")
        return {
            "FILE_TYPE_FILE": "file",
            "FILE_TYPE_DIRECTORY": "dir",
            "FILE_TYPE_SYMLINK": "symlink",
        }.get(self.type, "unknown")

    @property
    def size_bytes(self) -> int:
        """Size as an int (int64 arrives as a JSON string)."""
        return int(self.size)


class EntryResponse(_Msg):
    """``StatResponse`` / ``MakeDirResponse`` / ``MoveResponse``."""

    entry: EntryInfo | None = None


class ListDirResponse(_Msg):
    """``ListDirResponse``."""

    entries: list[EntryInfo] = msgspec.field(default_factory=list)


class _ErrorBody(msgspec.Struct):
    code: str | int | None = None
    message: str = ""


class _EndStream(msgspec.Struct):
    error: _ErrorBody | None = None


class UploadedFile(msgspec.Struct):
    """One entry of the ``POST /files`` answer."""

    path: str
    name: str = ""
    type: str = "file"


_event_decoder = msgspec.json.Decoder(ProcessStreamMessage)
_end_decoder = msgspec.json.Decoder(_EndStream)
_error_decoder = msgspec.json.Decoder(_ErrorBody)
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
