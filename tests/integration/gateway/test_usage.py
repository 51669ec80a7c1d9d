"""The usage API against a real gateway process: folded from the log, priced,
windowed, and another device's session is the usual 404."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import pytest

from eventstore.log import JetStreamLog
from schemas.events import SandboxUsage, TurnEnded, Usage

from .conftest import auth, create_session

RUN = 0.00003025  # the default running price per second
DEEPSEEK = (0.28, 0.42, 0.028)  # default per-million prices of deepseek-chat


async def get(http: aiohttp.ClientSession, url: str, device: str) -> tuple[int, Any]:
    async with http.get(url, headers=auth(device)) as r:
        return r.status, await r.json()


async def _used(bus: JetStreamLog, sid: str, at: float) -> None:
    usage = Usage(
        input_tokens=1000, output_tokens=200, cached_input_tokens=400, model_s=2.5
    )
    await bus.append(
        sid,
        TurnEnded(turn_id="t1", stop_reason="end_turn", usage=usage, model="x"),
        actor="worker:w1",
    )
    for state, secs, nxt in ((None, 0, "running"), ("running", 100, "paused")):
        at += secs
        await bus.append(
            sid,
            SandboxUsage(state=state, seconds=secs, next_state=nxt, at=at),  # type: ignore[arg-type]
            actor="broker",
        )


async def test_a_sessions_usage_is_folded_from_its_log_and_priced(
    gateway, http, bus: JetStreamLog
) -> None:
    sid = await create_session(http, gateway, "payer")
    start = time.time() - 1000
    await _used(bus, sid, start)
    status, body = await get(http, f"{gateway.base}/v1/sessions/{sid}/usage", "payer")
    assert status == 200, body
    assert body["tokens"] == {"input": 1000, "output": 200, "cached": 400}
    assert (body["turns"], body["model_seconds"]) == (1, 2.5)
    secs = body["sandbox_seconds"]
    assert secs["running"] == 100.0
    assert 890 < secs["paused"] < 1000  # still paused: counted up to now
    cost = body["cost"]
    assert cost["running"] == pytest.approx(100 * RUN)
    assert cost["input_tokens"] == pytest.approx(600 * DEEPSEEK[0] / 1e6)
    assert cost["output_tokens"] == pytest.approx(200 * DEEPSEEK[1] / 1e6)
    assert cost["cached_tokens"] == pytest.approx(400 * DEEPSEEK[2] / 1e6)
    items = sum(v for k, v in cost.items() if k != "total")
    assert cost["total"] == pytest.approx(items)


async def test_another_devices_session_usage_is_404(gateway, http) -> None:
    sid = await create_session(http, gateway, "owner")
    status, body = await get(http, f"{gateway.base}/v1/sessions/{sid}/usage", "thief")
    assert status == 404
    assert body["error"]["code"] == "session_not_found"
    status, _ = await get(http, f"{gateway.base}/v1/sessions/s_nope/usage", "owner")
    assert status == 404


async def test_device_usage_totals_its_sessions_within_the_window(
    gateway, http, bus: JetStreamLog
) -> None:
    start = int(time.time()) - 1000
    sids = [await create_session(http, gateway, "fleet") for _ in range(2)]
    for sid in sids:
        await _used(bus, sid, start)
    await create_session(http, gateway, "other")
    status, body = await get(http, f"{gateway.base}/v1/usage", "fleet")
    assert status == 200, body
    assert sorted(s["session_id"] for s in body["sessions"]) == sorted(sids)
    assert body["tokens"] == {"input": 2000, "output": 400, "cached": 800}
    assert body["sandbox_seconds"]["running"] == 200.0
    # A window from 50 s into the running interval counts its last 50 s.
    cut = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 50))
    status, body = await get(http, f"{gateway.base}/v1/usage?from={cut}", "fleet")
    assert status == 200, body
    assert body["sandbox_seconds"]["running"] == 100.0
    assert body["turns"] == 2
    # A window ending before the turns ended counts no tokens.
    end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 100))
    status, body = await get(http, f"{gateway.base}/v1/usage?to={end}", "fleet")
    assert status == 200, body
    assert (body["turns"], body["sessions"]) == (0, [])  # opened after it


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("from=yesterday", "from"),
        ("to=12", "to"),
        ("from=2030-01-01T00:00:00Z", "from"),
    ],
)
async def test_a_bad_window_is_422_naming_the_parameter(
    gateway, http, query: str, field: str
) -> None:
    status, body = await get(http, f"{gateway.base}/v1/usage?{query}", "fleet")
    assert status == 422
    assert body["error"]["field"] == field
