"""Push: webhook registration on the gateway, deliveries by real notifier processes
to a real receiver (an aiohttp server on loopback), verified with ``standardwebhooks``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from standardwebhooks import Webhook

from schemas.events import AgentMessageDelta, PermissionRequested, TurnEnded
from services.common.natsserver import free_port

from .conftest import ROOT, auth, create_session, start_gateway

HELD = -1


@dataclass
class Receiver:
    """A webhook receiver: records every request; can fail or hold some."""

    fail_first: int = 0  # answer 500 to each id's first N attempts
    hold: asyncio.Event | None = None  # answer nothing until set
    requests: list[tuple[dict[str, str], bytes, int]] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        msg_id = request.headers.get("webhook-id", "")
        seen = sum(1 for h, _, _ in self.requests if h.get("webhook-id") == msg_id)
        status = 500 if seen < self.fail_first else 200
        hold = self.hold
        if hold is not None:
            status = HELD  # the sender never gets an answer (it is killed)
        async with self.changed:
            self.requests.append((dict(request.headers), body, status))
            self.changed.notify_all()
        if hold is not None:
            await hold.wait()
        return web.Response(status=status if status != HELD else 503)

    def delivered(self) -> set[str]:
        return {h["webhook-id"] for h, _, s in self.requests if s == 200}

    async def wait_for(self, check, timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(check)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    app = web.Application()
    app.router.add_post("/hook", rec.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", rec.port).start()
    yield rec
    if rec.hold is not None:
        rec.hold.set()
    await runner.cleanup()


@dataclass
class Notifier:
    nats_url: str
    prefix: str
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "AGENTBUS_BUS_PREFIX": self.prefix,
            "AGENTBUS_WEBHOOK_ALLOW_PRIVATE": "1",
            "AGENTBUS_WEBHOOK_RETRY_BASE_S": "0.2",
            "AGENTBUS_WEBHOOK_RETRY_MAX_S": "1",
            "AGENTBUS_WEBHOOK_TIMEOUT_S": "2",
        }
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.notifier", "--nats", self.nats_url],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    async def running(self, count: int = 1) -> None:
        """Wait until the ``count``-th start has joined its consumers."""
        async with asyncio.timeout(20):
            while self.logs().count("notifier running") < count:
                assert self.proc is not None
                assert self.proc.poll() is None, self.logs()
                await asyncio.sleep(0.05)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.terminate()
        return self.proc.wait(15)


@pytest.fixture(scope="module")
async def open_gw(nats_server, gw_prefix, tmp_path_factory):
    """A gateway that accepts receivers on loopback (as in a test lab)."""
    gw = await start_gateway(
        nats_server.url,
        gw_prefix,
        tmp_path_factory.mktemp("hooks"),
        AGENTBUS_WEBHOOK_ALLOW_PRIVATE="1",
    )
    yield gw
    assert gw.stop() == 0, gw.logs()


@pytest.fixture
async def notifier(
    nats_server, gw_prefix, tmp_path, open_gw
) -> AsyncIterator[Notifier]:
    n = Notifier(nats_server.url, gw_prefix, tmp_path / "notifier.log")
    n.start()
    await n.running()
    yield n
    assert n.stop() in (0, -signal.SIGKILL), n.logs()
    assert "Traceback" not in n.logs()  # a clean stop logs no error


async def register(http, gw, device: str, url: str, events: list[str]) -> dict:
    async with http.put(
        f"{gw.base}/v1/webhooks", json={"url": url, "events": events},
        headers=auth(device),
    ) as r:  # fmt: skip
        body = await r.json()
        assert r.status == 200, body
        return body


async def test_register_show_and_remove_a_webhook(open_gw, http):
    hook = await register(
        http, open_gw, "wh-crud", "http://127.0.0.1:9/x", ["turn.ended"]
    )
    assert hook["secret"].startswith("whsec_")
    assert hook["events"] == ["turn.ended"]
    async with http.get(f"{open_gw.base}/v1/webhooks", headers=auth("wh-crud")) as r:
        shown = await r.json()
    assert shown["url"] == "http://127.0.0.1:9/x"
    assert shown["deliveries"] == []
    assert "secret" not in shown
    async with http.get(f"{open_gw.base}/v1/webhooks", headers=auth("other")) as r:
        assert r.status == 404  # per device
    async with http.delete(f"{open_gw.base}/v1/webhooks", headers=auth("wh-crud")) as r:
        assert r.status == 204
    async with http.get(f"{open_gw.base}/v1/webhooks", headers=auth("wh-crud")) as r:
        assert (await r.json())["error"]["code"] == "webhook_not_found"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "http://127.0.0.1:9/x", "events": ["agent.message_delta"]},
         "$.events[0]"),
        ({"url": "http://127.0.0.1:9/x", "events": []}, "$.events"),
        ({"url": "ftp://example.com/x", "events": ["turn.ended"]}, "$.url"),
        ({"url": "http://u:p@127.0.0.1/x", "events": ["turn.ended"]}, "$.url"),
    ],
)  # fmt: skip
async def test_bad_registrations_name_the_field(open_gw, http, body, field):
    async with http.put(
        f"{open_gw.base}/v1/webhooks", json=body, headers=auth("wh-bad")
    ) as r:
        answer = await r.json()
    assert r.status == 422, answer
    assert answer["error"]["field"] == field


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080/x", "http://localhost/x", "http://[::1]/x",
     "http://10.1.2.3/x", "http://169.254.169.254/latest", "http://192.168.0.1/"],
)  # fmt: skip
async def test_private_receivers_are_refused_by_default(gateway, http, url):
    async with http.put(
        f"{gateway.base}/v1/webhooks",
        json={"url": url, "events": ["turn.ended"]},
        headers=auth("wh-private"),
    ) as r:
        answer = await r.json()
    assert r.status == 422, answer
    assert answer["error"]["field"] == "$.url"


async def test_chosen_events_arrive_signed_as_stored(
    open_gw, notifier, receiver, http, bus
):
    hook = await register(
        http, open_gw, "wh-sig", receiver.url,
        ["permission.requested", "turn.ended"],
    )  # fmt: skip
    sid = await create_session(http, open_gw, "wh-sig")
    await bus.append(sid, AgentMessageDelta(turn_id="t1", text="x"), actor="w")
    await bus.append(
        sid,
        PermissionRequested(request_id="r1", turn_id="t1", call_id="c", tool="bash"),
        actor="w",
    )
    await bus.append(sid, TurnEnded(turn_id="t1", stop_reason="end_turn"), actor="w")
    await receiver.wait_for(lambda: len(receiver.requests) >= 2)
    stored = {e.type: e.raw for e in await bus.read(sid)}
    verifier = Webhook(hook["secret"])
    got = {}
    for headers, body, _ in receiver.requests:
        event = verifier.verify(body, headers)  # raises if the signature is bad
        got[event["type"]] = body
        assert headers["webhook-id"] == event["id"]
    assert got == {
        "permission.requested": stored["permission.requested"],
        "turn.ended": stored["turn.ended"],
    }
    headers, body, _ = receiver.requests[0]
    with pytest.raises(Exception, match="signature"):
        Webhook(hook["secret"]).verify(body + b" ", headers)


async def test_failed_deliveries_are_retried_with_backoff(
    open_gw, notifier, receiver, http, bus
):
    receiver.fail_first = 2
    await register(http, open_gw, "wh-retry", receiver.url, ["turn.ended"])
    sid = await create_session(http, open_gw, "wh-retry")
    ended = await bus.append(
        sid, TurnEnded(turn_id="t1", stop_reason="end_turn"), actor="w"
    )
    event_id = ended.event().id
    await receiver.wait_for(lambda: event_id in receiver.delivered())
    statuses = [s for h, _, s in receiver.requests if h["webhook-id"] == event_id]
    assert statuses == [500, 500, 200]
    async with asyncio.timeout(10):
        while True:  # the outcome is recorded right after the 200
            async with http.get(
                f"{open_gw.base}/v1/webhooks", headers=auth("wh-retry")
            ) as r:
                deliveries = (await r.json())["deliveries"]
            if deliveries and deliveries[0]["status"] == "delivered":
                break
            await asyncio.sleep(0.05)
    assert deliveries[0]["webhook_id"] == event_id
    assert deliveries[0]["attempts"] == 3
    assert deliveries[0]["seq"] == ended.seq


async def test_no_event_is_lost_across_a_notifier_sigkill(
    open_gw, notifier, receiver, http, bus
):
    await register(http, open_gw, "wh-kill", receiver.url, ["turn.ended"])
    sid = await create_session(http, open_gw, "wh-kill")
    receiver.hold = asyncio.Event()  # the first delivery hangs: in flight at the kill
    ids = []
    for i in range(5):
        stored = await bus.append(
            sid, TurnEnded(turn_id=f"a{i}", stop_reason="end_turn"), actor="w"
        )
        ids.append(stored.event().id)
    await receiver.wait_for(lambda: len(receiver.requests) >= 1)
    assert notifier.proc is not None
    notifier.proc.send_signal(signal.SIGKILL)
    notifier.proc.wait(15)
    for i in range(5):  # appended while no notifier runs
        stored = await bus.append(
            sid, TurnEnded(turn_id=f"b{i}", stop_reason="end_turn"), actor="w"
        )
        ids.append(stored.event().id)
    receiver.hold.set()
    receiver.hold = None
    notifier.start()
    await notifier.running(count=2)
    await receiver.wait_for(lambda: set(ids) <= receiver.delivered(), timeout=90)
    counts = Counter(h["webhook-id"] for h, _, _ in receiver.requests)
    assert set(counts) == set(ids)  # nothing else, nothing missing (dupes allowed)


async def test_two_notifier_replicas_share_the_work_each_event_once(
    open_gw, notifier, receiver, http, bus, nats_server, gw_prefix, tmp_path
):
    second = Notifier(nats_server.url, gw_prefix, tmp_path / "second.log")
    second.start()
    try:
        await second.running()
        await register(http, open_gw, "wh-two", receiver.url, ["turn.ended"])
        sid = await create_session(http, open_gw, "wh-two")
        ids = []
        for i in range(20):
            stored = await bus.append(
                sid, TurnEnded(turn_id=f"t{i}", stop_reason="end_turn"), actor="w"
            )
            ids.append(stored.event().id)
        await receiver.wait_for(lambda: set(ids) <= receiver.delivered())
        counts = Counter(h["webhook-id"] for h, _, _ in receiver.requests)
        # One shared durable: a consumer per replica would deliver everything twice.
        assert counts == dict.fromkeys(ids, 1)
    finally:
        assert second.stop() == 0, second.logs()
