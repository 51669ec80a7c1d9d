"""Pure parts of the gateway: mailbox bounds, rate limiter, auth, OpenAPI, settings."""

from __future__ import annotations

import json

import msgspec
import pytest

from eventstore.log import StoredEvent
from schemas.api import CreateSession, SendPrompt
from services.common.settings import SettingsError, load_settings
from services.gateway.auth import RateLimiter, authenticate
from services.gateway.bodies import field_of
from services.gateway.contract import ROUTES, openapi
from services.gateway.errors import RateLimitedError, UnauthorizedError
from services.gateway.hub import Frame, Mailbox, batch_of, sse_frame
from services.gateway.settings import GatewaySettings
from services.gateway.tokens import issue


async def test_full_queue_is_dropped_and_flagged_lost_not_cut():
    cut = []
    box = Mailbox(3, on_overflow=lambda: cut.append(True))
    assert all(box.offer(batch_of([Frame(i, b"x", b"x")])) for i in range(3))
    assert box.offer(batch_of([Frame(3, b"x", b"x")]))
    assert box.lost
    assert box.ended is None
    assert cut == []
    assert box.queued() == []  # memory released at once
    assert box.offer(batch_of([Frame(4, b"x", b"x")]))
    assert [f.seq for f in box.queued()] == [4]


async def test_mailbox_take_returns_all_queued_frames_in_order():
    box = Mailbox(10)
    for i in range(4):
        box.offer(batch_of([Frame(i, b"%d" % i, b"")]))
    assert [f.seq for f in await box.take(1.0)] == [0, 1, 2, 3]
    assert await box.take(0.01) == []


def test_rate_limiter_allows_burst_then_answers_retry_after():
    limiter = RateLimiter(rate=2.0, burst=2)
    limiter.check("d", now=0.0)
    limiter.check("d", now=0.0)
    with pytest.raises(RateLimitedError) as info:
        limiter.check("d", now=0.0)
    assert info.value.headers["Retry-After"] == "1"
    limiter.check("other", now=0.0)  # per device
    limiter.check("d", now=0.6)  # refilled


def test_rate_limiter_forgets_least_recent_devices():
    limiter = RateLimiter(rate=1.0, burst=1, max_devices=2)
    for device in ("a", "b", "c"):
        limiter.check(device, now=0.0)  # each spends its only token
    with pytest.raises(RateLimitedError):
        limiter.check("c", now=0.0)  # remembered: still empty
    limiter.check("a", now=0.0)  # forgotten (least recent): starts full again
    with pytest.raises(RateLimitedError):
        limiter.check("a", now=0.0)  # and is remembered from now on


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer ",
        "Token x",
        "Bearer v1.d.9999999999.AAAA",
        "Bearer \udcff\udcfe",  # undecodable bytes as aiohttp passes them on
        "Bearer v1.d\u00e9v.9999999999.AAAA",
    ],
)
def test_authenticate_refuses_without_saying_why(header):
    with pytest.raises(UnauthorizedError) as info:
        authenticate(b"k", header)
    assert info.value.message == "a valid device token is required"


def test_authenticate_accepts_a_valid_token_any_scheme_case():
    assert authenticate(b"k", "bearer " + issue(b"k", "dev-1")) == "dev-1"


@pytest.mark.parametrize(
    ("raw", "cls", "field"),
    [
        (b"{}", SendPrompt, "$.text"),
        (b'{"text": "a", "x": 1}', SendPrompt, "$.x"),
        (b'{"text": 1}', SendPrompt, "$.text"),
        (b'{"metadata": {"a": 1}}', CreateSession, "$.metadata[...]"),
    ],
)
def test_validation_errors_name_the_field(raw, cls, field):
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.json.decode(raw, type=cls)
    assert field_of(info.value) == field


def test_openapi_is_3_1_and_every_ref_resolves():
    doc = openapi()
    assert doc["openapi"] == "3.1.0"
    text = json.dumps(doc)
    refs = {
        part.split('"')[0] for part in text.split('"$ref": "#/components/schemas/')[1:]
    }
    assert refs
    assert refs <= set(doc["components"]["schemas"])
    for route in ROUTES:
        assert route.method.lower() in doc["paths"][route.path]
    prompt = doc["components"]["schemas"]["SendPrompt"]
    assert prompt["required"] == ["text"]


def test_settings_read_env_and_refuse_bad_values():
    env = {"AGENTBUS_GATEWAY_PING_S": "2.5", "AGENTBUS_DEVICE_SECRET": "s"}
    settings = load_settings(GatewaySettings, env)
    assert (settings.gateway_ping_s, settings.device_secret) == (2.5, "s")
    with pytest.raises(SettingsError) as info:
        load_settings(GatewaySettings, {"AGENTBUS_GATEWAY_CLIENT_BUFFER": "many"})
    assert info.value.variable == "AGENTBUS_GATEWAY_CLIENT_BUFFER"


def test_main_exits_2_naming_a_bad_variable(monkeypatch, capsys):
    from services.gateway.__main__ import main

    monkeypatch.setenv("AGENTBUS_GATEWAY_RATE_BURST", "lots")
    assert main([]) == 2
    assert "AGENTBUS_GATEWAY_RATE_BURST" in capsys.readouterr().err


def test_in_order_drops_replayed_frames_and_stops_at_a_hole():
    from services.gateway.stream import in_order

    frames = [Frame(seq, b"", b"") for seq in (3, 4, 5, 6, 8, 9)]
    ready, rest, last = in_order(frames, 4)
    assert [f.seq for f in ready] == [5, 6]
    assert [f.seq for f in rest] == [8, 9]
    assert last == 6


async def test_mailbox_in_direct_mode_writes_through_and_ends_on_refusal():
    written: list[int] = []
    box = Mailbox(1)
    box.direct = lambda b: written.append(b.last) if b.last < 3 else "slow_client"
    assert box.offer(batch_of([Frame(1, b"", b"")]))
    assert box.offer(batch_of([Frame(2, b"", b"")]))
    assert not box.offer(batch_of([Frame(3, b"", b"")]))
    assert written == [1, 2]
    assert box.ended == "slow_client"


def test_batch_of_encodes_one_http_chunk_for_consecutive_frames():
    frames = [Frame(seq, b"id: %d\n\n" % seq, b"") for seq in (5, 6, 7)]
    batch = batch_of(frames)
    assert (batch.first, batch.last) == (5, 7)
    assert batch.data == b"id: 5\n\nid: 6\n\nid: 7\n\n"
    assert batch.chunk == b"%x\r\n%s\r\n" % (len(batch.data), batch.data)


def test_an_sse_frame_keeps_a_newline_in_the_stored_bytes_inside_data_lines():
    frame = sse_frame(StoredEvent(7, "agent.message", b'{"a":1}\n{"b":2}'))
    assert frame.data == (
        b'id: 7\nevent: agent.message\ndata: {"a":1}\ndata: {"b":2}\n\n'
    )
    assert frame.chunk == b"%x\r\n%s\r\n" % (len(frame.data), frame.data)
