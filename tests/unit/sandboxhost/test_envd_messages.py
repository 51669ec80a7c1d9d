"""The sandbox host encodes envd messages with the client's Structs (schemas.envd).

The bytes are pinned to what the host sent when it built dicts by hand, so the
shared Structs change nothing on the wire the e2b SDK reads.
"""

from __future__ import annotations

import json

from services.envd.errors import EnvdNotFound
from services.envd.wire import decode_process_event, end_stream_error
from services.sandboxhost.connect import (
    END_STREAM,
    HEADER,
    end_of_stream,
    envelope,
    unary_error,
)
from services.sandboxhost.envd_process import KEEPALIVE, started
from services.sandboxhost.errors import EnvdRpcError


def _framed(obj: object, flags: int = 0) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode()
    return HEADER.pack(flags, len(data)) + data


def test_stream_messages_keep_their_bytes() -> None:
    assert envelope(started(4242)) == _framed({"event": {"start": {"pid": 4242}}})
    assert envelope(KEEPALIVE) == _framed({"event": {"keepalive": {}}})
    assert end_of_stream() == _framed({}, END_STREAM)
    error = EnvdRpcError("not_found", "file '/wörk' not found")
    old = {"error": {"code": "not_found", "message": "file '/wörk' not found"}}
    assert end_of_stream(error) == _framed(old, END_STREAM)


def test_unary_errors_keep_their_bytes() -> None:
    resp = unary_error(EnvdRpcError("unimplemented", "Nope is not implemented"))
    body = {"code": "unimplemented", "message": "Nope is not implemented"}
    assert (resp.status, resp.body) == (501, json.dumps(body).encode())


def test_the_client_reads_what_the_host_writes() -> None:
    event = decode_process_event("t", envelope(started(7))[HEADER.size :])
    assert event.start is not None
    assert event.start.pid == 7
    assert decode_process_event("t", envelope(KEEPALIVE)[5:]).keepalive == {}
    assert end_stream_error("t", end_of_stream()[5:]) is None
    gone = end_stream_error("t", end_of_stream(EnvdRpcError("not_found", "x"))[5:])
    assert isinstance(gone, EnvdNotFound)
