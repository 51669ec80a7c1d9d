"""Event codec: typed round trips, forward compatibility, errors that name the field."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec
import pytest

from schemas import (
    EVENT_TYPES,
    Event,
    EventDecodeError,
    GenericData,
    ToolCall,
    UserPrompt,
    decode_event,
    encode_event,
)


def _raw(type_: str, data: object, **extra: object) -> bytes:
    env = {
        "session_id": "s_1",
        "seq": 3,
        "id": "ev_1",
        "type": type_,
        "ts": "2026-11-29T10:00:00.000000Z",
        "actor": "device:a",
        "data": data,
        "prev": "sha256:00",
        **extra,
    }
    return json.dumps(env).encode()


def test_typed_event_round_trips_byte_exact():
    event = Event(
        session_id="s_1",
        seq=1,
        id="ev_1",
        type="tool.call",
        ts="t",
        actor="worker:w",
        data=ToolCall(turn_id="t1", call_id="c1", tool="read", args={"path": "a.py"}),
    )
    raw = encode_event(event)
    assert decode_event(raw) == event
    assert encode_event(decode_event(raw)) == raw


def test_unknown_type_from_a_newer_writer_passes_through_unchanged():
    raw = _raw("agent.plan", {"steps": [1, 2, {"x": "é"}]})
    event = decode_event(raw)
    assert isinstance(event.data, GenericData)
    assert json.loads(encode_event(event)) == json.loads(raw)


def test_new_field_on_a_known_type_is_tolerated():
    event = decode_event(
        _raw("user.prompt", {"text": "hi", "turn_id": "t", "lang": "de"})
    )
    assert event.data == UserPrompt(text="hi", turn_id="t")


def test_malformed_payload_names_the_field_path():
    with pytest.raises(EventDecodeError) as info:
        decode_event(_raw("user.prompt", {"text": 5, "turn_id": "t"}))
    assert info.value.path == "$.data.text"


def test_missing_envelope_field_names_it():
    raw = json.dumps({"session_id": "s", "seq": 1, "id": "e", "type": "x"}).encode()
    with pytest.raises(EventDecodeError) as info:
        decode_event(raw)
    assert "ts" in str(info.value)


def test_not_json_is_a_decode_error():
    with pytest.raises(EventDecodeError):
        decode_event(b"{nope")


def test_every_event_type_of_the_design_is_declared():
    design = {
        "session.created",
        "session.closed",
        "user.prompt",
        "turn.started",
        "agent.thought.delta",
        "agent.message.delta",
        "agent.message",
        "tool.call",
        "tool.update",
        "tool.result",
        "permission.requested",
        "permission.resolved",
        "turn.cancel_requested",
        "turn.ended",
        "worker.assigned",
        "worker.released",
        "sandbox.state",
        "error",
    }
    assert design <= set(EVENT_TYPES)


def test_schema_command_prints_a_variant_per_event_type():
    out = subprocess.run(
        [sys.executable, "-m", "services.cli", "schema"],
        capture_output=True,
        check=True,
    ).stdout
    schema = msgspec.json.decode(out)
    titles = {v["title"] for v in schema["oneOf"]}
    assert titles == set(EVENT_TYPES)
    assert schema["$defs"]["UserPrompt"]["required"] == ["text", "turn_id"]
