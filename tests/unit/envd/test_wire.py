"""Connect-JSON framing and message decoding."""

from __future__ import annotations

import base64
import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.envd.errors import (
    EnvdAuthError,
    EnvdError,
    EnvdInvalidArgument,
    EnvdNotFound,
    EnvdProtocolError,
)
from services.envd.wire import (
    FLAG_END_STREAM,
    EntryResponse,
    EnvelopeDecoder,
    decode_process_event,
    end_stream_error,
    envelope,
    http_error,
)


def _stream(
    *messages: dict[str, object], end: dict[str, object] | None = None
) -> bytes:
    body = b"".join(envelope(json.dumps(m).encode()) for m in messages)
    return body + envelope(json.dumps(end or {}).encode(), FLAG_END_STREAM)


@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30))
def test_envelopes_decode_identically_under_any_chunking(cuts: list[int]) -> None:
    raw = _stream(
        {"event": {"start": {"pid": 7}}},
        {"event": {"data": {"stdout": base64.b64encode(b"x" * 100).decode()}}},
        {"event": {"end": {"exited": True, "status": "exit status 0"}}},
    )
    decoder = EnvelopeDecoder("t")
    got: list[tuple[int, bytes]] = []
    pos = 0
    for cut in cuts * (len(raw) // sum(cuts) + 1):
        got += decoder.feed(raw[pos : pos + cut])
        pos += cut
        if pos >= len(raw):
            break
    assert [f for f, _ in got] == [0, 0, 0, FLAG_END_STREAM]
    assert decoder.pending == 0


def test_process_events_decode_bytes_exactly_and_defaults() -> None:
    start = decode_process_event("t", b'{"event":{"start":{"pid":42}}}')
    data = decode_process_event("t", b'{"event":{"data":{"stderr":"w6k="}}}')
    end = decode_process_event(
        "t", b'{"event":{"end":{"exited":true,"status":"exit status 0"}}}'
    )
    killed = decode_process_event(
        "t", b'{"event":{"end":{"exitCode":-1,"error":"signal: killed"}}}'
    )
    assert start.start is not None
    assert start.start.pid == 42
    assert data.data is not None
    assert data.data.stderr == b"\xc3\xa9"
    assert end.end is not None
    assert end.end.exit_code == 0
    assert end.end.error is None
    assert killed.end is not None
    assert killed.end.exit_code == -1


def test_keepalive_and_unknown_fields_are_tolerated() -> None:
    event = decode_process_event("t", b'{"event":{"keepalive":{}},"extra":1}')
    assert event.keepalive == {}
    assert event.start is None
    assert event.end is None


def test_end_stream_error_becomes_typed_error() -> None:
    err = end_stream_error(
        "run",
        b'{"error":{"code":"invalid_argument","message":"cwd \'/x\' does not exist"}}',
    )
    assert isinstance(err, EnvdInvalidArgument)
    assert "does not exist" in str(err)
    assert end_stream_error("run", b"{}") is None


def test_compressed_envelope_is_a_protocol_error() -> None:
    with pytest.raises(EnvdProtocolError):
        EnvelopeDecoder("t").feed(envelope(b"{}", 0x01))


@pytest.mark.parametrize(
    ("status", "body", "kind", "code"),
    [
        (
            404,
            b'{"code":"not_found","message":"file not found: /nope"}',
            EnvdNotFound,
            "not_found",
        ),
        (
            404,
            b'{"code":404,"message":"path \'/x\' does not exist"}',
            EnvdNotFound,
            "not_found",
        ),
        (
            401,
            b'{"code":401,"message":"unauthorized access"}',
            EnvdAuthError,
            "unauthenticated",
        ),
        (400, b"path is a directory", EnvdInvalidArgument, "invalid_argument"),
        (507, b"", EnvdError, "resource_exhausted"),
    ],
)
def test_http_errors_map_connect_and_plain_bodies(
    status: int, body: bytes, kind: type[EnvdError], code: str
) -> None:
    err = http_error("op", status, body)
    assert type(err) is kind
    assert err.code == code


def test_entry_info_accepts_int64_as_string_and_enum_names_or_numbers() -> None:
    raw = (
        b'{"entry":{"name":"l","type":"FILE_TYPE_DIRECTORY","path":"/workspace/l",'
        b'"size":"4096","isSymlink":true,"symlinkTarget":"/etc"}}'
    )
    entry = msgspec.json.decode(raw, type=EntryResponse).entry
    assert entry is not None
    assert (entry.kind, entry.size_bytes, entry.is_symlink) == ("dir", 4096, True)
    numeric = msgspec.json.decode(
        b'{"entry":{"type":1,"size":3}}', type=EntryResponse
    ).entry
    assert numeric is not None
    assert (numeric.kind, numeric.size_bytes) == ("file", 3)
