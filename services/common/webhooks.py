"""The webhooks KV bucket: registrations (gateway writes) and deliveries (notifier).

Keys: ``reg.<device>`` → :class:`WebhookRecord`; ``dlv.<device>`` →
:class:`DeliveryLog` (the last ``KEEP_DELIVERIES`` outcomes, updated by
revision compare-and-set so notifier replicas never lose each other's writes).
"""

from __future__ import annotations

import base64
import logging
import secrets
from datetime import UTC, datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from eventstore.streams import ensure_kv
from schemas.names import BusNames
from schemas.webhooks import KEEP_DELIVERIES, Delivery, DeliveryLog, WebhookRecord

log = logging.getLogger(__name__)
SECRET_PREFIX = "whsec_"  # noqa: S105 - the spec's prefix, not a secret
CAS_ATTEMPTS = 20

_RECORD = msgspec.json.Decoder(WebhookRecord)
_LOG = msgspec.json.Decoder(DeliveryLog)


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a secret (its base64 part, decoded)."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def now_iso() -> str:
    """The current time, RFC 3339 UTC."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


async def open_webhooks(js: JetStreamContext, names: BusNames) -> WebhookStore:
    """Declare the bucket (idempotent) and wrap it."""
    kv = await ensure_kv(
        js,
        KeyValueConfig(
            bucket=names.webhooks_bucket, history=1, storage=StorageType.FILE
        ),
    )
    return WebhookStore(kv)


class WebhookStore:
    """Registrations and delivery outcomes of every device."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv
        # Outcomes waiting for their device's writer (see record()).
        self._pending: dict[str, list[Delivery]] = {}

    async def put(self, record: WebhookRecord) -> None:
        """Register (or replace) a device's webhook."""
        await self._kv.put(f"reg.{record.device_id}", msgspec.json.encode(record))

    async def get(self, device_id: str) -> WebhookRecord | None:
        """The device's registration, or None."""
        try:
            entry = await self._kv.get(f"reg.{device_id}")
        except KeyNotFoundError:
            return None
        return _RECORD.decode(entry.value) if entry.value else None

    async def delete(self, device_id: str) -> None:
        """Remove the registration and its delivery log (idempotent)."""
        for key in (f"reg.{device_id}", f"dlv.{device_id}"):
            await self._kv.delete(key)

    async def deliveries(self, device_id: str) -> list[Delivery]:
        """The device's last deliveries, newest first."""
        log, _ = await self._log(device_id)
        return log.deliveries

    async def record(self, device_id: str, delivery: Delivery) -> None:
        """Record a delivery's latest outcome (replacing its earlier one).

        Outcomes of one device are coalesced: while one caller writes, others
        queue theirs and return; the writer then writes everything queued in
        one compare-and-set (replicas still race only by CAS).
        """
        queued = self._pending.setdefault(device_id, [])
        queued.append(delivery)
        if len(queued) > 1:
            return  # a writer is active and will take it
        try:
            while queued:
                batch = list(queued)
                await self._write(device_id, batch)
                del queued[: len(batch)]
        finally:
            if self._pending.get(device_id) is queued and not queued:
                del self._pending[device_id]
            elif queued:
                queued.clear()  # the write failed: drop (bookkeeping only)
                self._pending.pop(device_id, None)

    async def _write(self, device_id: str, batch: list[Delivery]) -> None:
        key = f"dlv.{device_id}"
        newest = {d.webhook_id: d for d in batch}  # later outcomes win
        fresh = list(reversed(newest.values()))
        for _ in range(CAS_ATTEMPTS):
            current, revision = await self._log(device_id)
            others = [d for d in current.deliveries if d.webhook_id not in newest]
            value = msgspec.json.encode(
                DeliveryLog(deliveries=[*fresh, *others][:KEEP_DELIVERIES])
            )
            try:
                if revision:
                    await self._kv.update(key, value, last=revision)
                else:
                    await self._kv.create(key, value)
            except KeyWrongLastSequenceError:
                continue  # another replica wrote first: merge again
            return
        log.warning("delivery log of %s: gave up after races", device_id)

    async def _log(self, device_id: str) -> tuple[DeliveryLog, int]:
        try:
            entry = await self._kv.get(f"dlv.{device_id}")
        except KeyNotFoundError:
            return DeliveryLog(), 0
        if not entry.value or entry.revision is None:
            return DeliveryLog(), entry.revision or 0
        return _LOG.decode(entry.value), entry.revision
