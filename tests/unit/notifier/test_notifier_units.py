"""Signing, back-off, the address guard and the router's cheap decisions."""

from __future__ import annotations

import time

import aiohttp
import msgspec
import pytest
from standardwebhooks import Webhook

from schemas.webhooks import OutboxJob, WebhookRecord
from services.common.addresses import (
    AddressRefusedError,
    PublicOnlyResolver,
    check_url,
    is_public,
)
from services.common.webhooks import new_secret
from services.notifier.deliver import Deliverer, backoff, sign
from services.notifier.router import PoisonError, Router
from services.notifier.settings import NotifierSettings


def test_signature_verifies_with_the_standardwebhooks_package():
    secret, body = new_secret(), b'{"type":"turn.ended","n":1}'
    now = int(time.time())  # the package refuses timestamps far from now
    headers = {
        "webhook-id": "ev_1",
        "webhook-timestamp": str(now),
        "webhook-signature": sign(secret, "ev_1", now, body),
    }
    assert Webhook(secret).verify(body, headers) == {"type": "turn.ended", "n": 1}
    headers["webhook-signature"] = sign(new_secret(), "ev_1", now, body)
    with pytest.raises(Exception, match="signature"):
        Webhook(secret).verify(body, headers)


def test_backoff_doubles_up_to_the_cap():
    settings = NotifierSettings(webhook_retry_base_s=1.0, webhook_retry_max_s=10.0)
    assert [backoff(settings, n) for n in (1, 2, 3, 4, 5, 9)] == [
        1.0, 2.0, 4.0, 8.0, 10.0, 10.0,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("127.0.0.1", False), ("10.0.0.1", False), ("192.168.1.1", False),
        ("172.16.0.1", False), ("169.254.169.254", False), ("100.64.0.1", False),
        ("0.0.0.0", False), ("::1", False), ("fe80::1", False), ("fc00::1", False),
        ("::ffff:127.0.0.1", False), ("224.0.0.1", False),
        ("8.8.8.8", True), ("2606:4700:4700::1111", True),
    ],
)  # fmt: skip
def test_only_global_unicast_addresses_are_public(address, public):
    assert is_public(address) is public


@pytest.mark.parametrize(
    "url",
    ["http://localhost:1/x", "http://127.0.0.1/x", "ftp://example.com/",
     "http://user:pw@example.com/", "not a url", "http://[::1]:80/"],
)  # fmt: skip
async def test_check_url_refuses_without_allow_private(url):
    with pytest.raises(AddressRefusedError):
        await check_url(url, allow_private=False)


async def test_check_url_allows_loopback_when_allowed():
    assert await check_url("http://127.0.0.1:9/x", allow_private=True) == ["127.0.0.1"]


async def test_the_delivery_resolver_refuses_a_name_on_loopback():
    resolver = PublicOnlyResolver()
    try:
        with pytest.raises(OSError, match="non-public"):
            await resolver.resolve("localhost", 80)
    finally:
        await resolver.close()


async def test_a_loopback_receiver_is_refused_at_delivery_by_default():
    record = WebhookRecord(
        device_id="d", url="http://127.0.0.1:9/x", events=["turn.ended"],
        secret=new_secret(), created_at="",
    )  # fmt: skip
    job = OutboxJob(
        device_id="d", session_id="s", seq=1, event_id="ev", event_type="turn.ended",
        body=msgspec.Raw(b"{}"),
    )  # fmt: skip
    async with aiohttp.ClientSession() as http:
        deliverer = Deliverer(None, NotifierSettings(), http)  # type: ignore[arg-type]
        outcome = await deliverer.attempt(record, job)
    assert outcome.status == "refused"
    assert "AGENTBUS_WEBHOOK_ALLOW_PRIVATE" in (outcome.error or "")


async def test_router_skips_events_nobody_can_subscribe_to_without_lookups():
    router = Router(None, None, None, None)  # type: ignore[arg-type]
    headers = {"Agentbus-Seq": "3", "Agentbus-Type": "agent.message_delta"}
    assert await router.job(b"not even json", headers) is None
    assert await router.job(b"{}", {}) is None  # no type header: not pushable


async def test_router_names_an_unreadable_pushable_event_poison():
    router = Router(None, None, None, None)  # type: ignore[arg-type]
    with pytest.raises(PoisonError):
        await router.job(b"{nope", {"Agentbus-Type": "turn.ended"})
