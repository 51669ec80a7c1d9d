"""Log → outbox: one job per event a device asked to be pushed.

The router reads the session log through a durable consumer shared by every
notifier replica (each log message goes to one replica) and only decides: the
event type is checked from a header (most events, e.g. deltas, are acked
without decoding), the device is found from the session index (or, for
``session.created``, from the event itself), and a job is published to the
outbox stream with ``Nats-Msg-Id`` = the event id, so a router that dies
between publishing and acking is deduplicated. Deliveries (slow, retried)
happen from the outbox, never holding the log consumer.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from eventstore.index import SessionIndex
from eventstore.reader import TYPE_HEADER
from schemas.names import BusNames
from schemas.webhooks import PUSHABLE, OutboxJob, WebhookRecord
from services.common.webhooks import WebhookStore

log = logging.getLogger(__name__)
DEVICE_CACHE = 10_000
REGISTRATION_TTL_S = 1.0


class _Envelope(msgspec.Struct, kw_only=True):
    session_id: str
    seq: int
    id: str
    type: str
    data: msgspec.Raw = msgspec.Raw(b"{}")


class _Created(msgspec.Struct, kw_only=True):
    device_id: str


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_CREATED = msgspec.json.Decoder(_Created)


class PoisonError(Exception):
    """A log message the router cannot read (acked and skipped, never a crash)."""


class Router:
    """Turns log messages into outbox jobs."""

    def __init__(
        self,
        js: JetStreamContext,
        names: BusNames,
        index: SessionIndex,
        store: WebhookStore,
    ) -> None:
        self._js = js
        self._names = names
        self._index = index
        self._store = store
        self._devices: OrderedDict[str, str] = OrderedDict()
        self._registrations: dict[str, tuple[float, WebhookRecord | None]] = {}

    async def handle(self, msg: Msg) -> None:
        """Publish the message's job (if any), then ack it."""
        try:
            job = await self.job(msg.data, msg.headers or {})
        except PoisonError as exc:
            log.warning("skipping unreadable log message %s: %s", msg.subject, exc)
            await msg.term()
            return
        if job is not None:
            await self._js.publish(
                self._names.webhook_subject(job.device_id),
                msgspec.json.encode(job),
                stream=self._names.webhook_stream,
                headers={"Nats-Msg-Id": f"{job.device_id}.{job.event_id}"},
            )
        await msg.ack()

    async def job(self, data: bytes, headers: dict[str, str]) -> OutboxJob | None:
        """The outbox job of one stored event, or None if nobody wants it."""
        event_type = headers.get(TYPE_HEADER)
        if event_type not in PUSHABLE:
            return None  # most events: no decode, no lookup
        try:
            envelope = _ENVELOPE.decode(data)
        except msgspec.DecodeError as exc:
            raise PoisonError(str(exc)) from None
        device = await self._device(envelope)
        if device is None:
            return None
        record = await self._registration(device)
        if record is None or envelope.type not in record.events:
            return None
        return OutboxJob(
            device_id=device,
            session_id=envelope.session_id,
            seq=envelope.seq,
            event_id=envelope.id,
            event_type=envelope.type,
            body=msgspec.Raw(data),
        )

    async def _registration(self, device: str) -> WebhookRecord | None:
        """The device's registration, cached for ``REGISTRATION_TTL_S``.

        A change reaches routing within that time; the deliverer reads the
        current one for every attempt (URL, secret, removal).
        """
        now = time.monotonic()
        cached = self._registrations.get(device)
        if cached is not None and now - cached[0] < REGISTRATION_TTL_S:
            return cached[1]
        record = await self._store.get(device)
        if len(self._registrations) >= DEVICE_CACHE:
            self._registrations.clear()
        self._registrations[device] = (now, record)
        return record

    async def _device(self, envelope: _Envelope) -> str | None:
        sid = envelope.session_id
        device = self._devices.get(sid)
        if device is None:
            if envelope.type == "session.created":
                # Indexed only after this append: the event itself names the device.
                try:
                    device = _CREATED.decode(envelope.data).device_id
                except msgspec.DecodeError as exc:
                    raise PoisonError(str(exc)) from None
            else:
                record = await self._index.get(sid)
                if record is None:
                    return None
                device = record.device_id
        self._devices[sid] = device
        self._devices.move_to_end(sid)
        if len(self._devices) > DEVICE_CACHE:
            self._devices.popitem(last=False)
        return device
