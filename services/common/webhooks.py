"""The webhooks KV bucket: registrations (gateway writes) and deliveries (notifier).

Keys: ``reg.<device>`` → :class:`WebhookRecord`; ``dlv.<device>`` →
:class:`DeliveryLog` (the last ``KEEP_DELIVERIES`` outcomes, updated by
revision compare-and-set so notifier replicas never lose each other's writes).
"""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from schemas.names import BusNames
from schemas.webhooks import KEEP_DELIVERIES, Delivery, DeliveryLog, WebhookRecord

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
    kv = await js.create_key_value(
        KeyValueConfig(
            bucket=names.webhooks_bucket, history=1, storage=StorageType.FILE
        )
    )
    return WebhookStore(kv)


class WebhookStore:
    """Registrations and delivery outcomes of every device."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

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
        """Record a delivery's latest outcome (replacing its earlier one)."""
        key = f"dlv.{device_id}"
        for _ in range(CAS_ATTEMPTS):
            log, revision = await self._log(device_id)
            others = [d for d in log.deliveries if d.webhook_id != delivery.webhook_id]
            value = msgspec.json.encode(
                DeliveryLog(deliveries=[delivery, *others][:KEEP_DELIVERIES])
            )
            try:
                if revision:
                    await self._kv.update(key, value, last=revision)
                else:
                    await self._kv.create(key, value)
            except KeyWrongLastSequenceError:
                continue  # another replica wrote first: merge again
            return

    async def _log(self, device_id: str) -> tuple[DeliveryLog, int]:
        try:
            entry = await self._kv.get(f"dlv.{device_id}")
        except KeyNotFoundError:
            return DeliveryLog(), 0
        if not entry.value or entry.revision is None:
            return DeliveryLog(), entry.revision or 0
        return _LOG.decode(entry.value), entry.revision
