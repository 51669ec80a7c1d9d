"""Outbox → receiver: one signed POST per attempt, retried with back-off.

Standard Webhooks: ``webhook-id`` (the event id: the same on every retry, so a
receiver can deduplicate), ``webhook-timestamp`` (unix seconds of the attempt),
``webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` keyed by
the secret's base64 part; the body is the event's JSON exactly as stored (as
the SSE stream sends it).

A job is acked only after a 2xx answer (or when it is given up), so a notifier
killed mid-delivery leaves it to be redelivered: at least once. A failed
attempt is NAKed with a delay (JetStream redelivers it later, to any replica);
other jobs are not held up meanwhile.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time

import aiohttp
import msgspec
from nats.aio.msg import Msg

from schemas.webhooks import Delivery, DeliveryStatus, OutboxJob, WebhookRecord
from services.common.addresses import AddressRefusedError, check_url
from services.common.webhooks import WebhookStore, now_iso, secret_key
from services.notifier.settings import NotifierSettings

log = logging.getLogger(__name__)
_JOB = msgspec.json.Decoder(OutboxJob)
# Bytes of a receiver's answer read (and discarded) per attempt.
MAX_ANSWER = 64 * 1024


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    mac = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def backoff(settings: NotifierSettings, attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``."""
    delay = settings.webhook_retry_base_s * 2 ** max(0, attempt - 1)
    return float(min(settings.webhook_retry_max_s, delay))


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What one attempt came to."""

    status: DeliveryStatus
    http_status: int | None = None
    error: str | None = None


class Deliverer:
    """Handles outbox jobs."""

    def __init__(
        self,
        store: WebhookStore,
        settings: NotifierSettings,
        http: aiohttp.ClientSession,
    ) -> None:
        self._store = store
        self._settings = settings
        self._http = http

    async def handle(self, msg: Msg) -> None:
        """Attempt the job; ack, NAK with a delay, or give it up."""
        try:
            job = _JOB.decode(msg.data)
        except msgspec.DecodeError as exc:
            log.warning("skipping unreadable outbox job: %s", exc)
            await msg.term()
            return
        record = await self._store.get(job.device_id)
        if record is None or job.event_type not in record.events:
            await msg.ack()  # unregistered since: nothing to deliver
            return
        attempt = msg.metadata.num_delivered
        outcome = await self.attempt(record, job)
        last = attempt >= self._settings.webhook_max_attempts
        if outcome.status == "retrying" and last:
            outcome = msgspec.structs.replace(outcome, status="failed")
        await self._store.record(job.device_id, _delivery(job, outcome, attempt))
        if outcome.status == "retrying":
            await msg.nak(delay=backoff(self._settings, attempt))
        elif outcome.status == "delivered":
            await msg.ack()
        else:
            log.warning("webhook %s %s: %s", job.event_id, outcome.status, outcome)
            await msg.term()

    async def attempt(self, record: WebhookRecord, job: OutboxJob) -> Outcome:
        """One signed POST."""
        try:
            await check_url(
                record.url, allow_private=self._settings.webhook_allow_private
            )
        except AddressRefusedError as exc:
            return Outcome(status="refused", error=exc.reason)
        body = bytes(job.body)
        stamp = int(time.time())
        headers = {
            "webhook-id": job.event_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": sign(record.secret, job.event_id, stamp, body),
            "Content-Type": "application/json",
            "User-Agent": "agentbus-notifier",
        }
        timeout = aiohttp.ClientTimeout(total=self._settings.webhook_timeout_s)
        try:
            async with self._http.post(
                record.url,
                data=body,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            ) as resp:
                await resp.content.read(MAX_ANSWER)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Outcome(status="retrying", error=f"{type(exc).__name__}: {exc}")
        if 200 <= status < 300:
            return Outcome(status="delivered", http_status=status)
        return Outcome(status="retrying", http_status=status, error=f"HTTP {status}")


def _delivery(job: OutboxJob, outcome: Outcome, attempts: int) -> Delivery:
    return Delivery(
        webhook_id=job.event_id,
        event_type=job.event_type,
        session_id=job.session_id,
        seq=job.seq,
        status=outcome.status,
        attempts=attempts,
        at=now_iso(),
        http_status=outcome.http_status,
        error=outcome.error,
    )
