"""Push: a device's webhook registration, its deliveries, and the outbox job.

The gateway writes registrations (``PUT /v1/webhooks``) into a KV bucket; the
notifier service reads them, delivers events (Standard Webhooks) and records
each delivery's outcome next to the registration.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

import msgspec

from schemas.api import Request

PushableEvent = Literal[
    "permission.requested",
    "permission.resolved",
    "turn.started",
    "turn.ended",
    "agent.message",
    "tool.result",
    "session.created",
    "session.closed",
    "sandbox.state",
    "error",
]
# Events a device can subscribe to: the ones worth a push while no stream is open.
PUSHABLE: frozenset[str] = frozenset(get_args(PushableEvent))
DeliveryStatus = Literal["delivered", "retrying", "failed", "refused", "dropped"]
# How many delivery outcomes GET /v1/webhooks shows (newest first).
KEEP_DELIVERIES = 20


class PutWebhook(Request, frozen=True, kw_only=True):
    """``PUT /v1/webhooks``: where to push and which event types."""

    url: Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]
    events: Annotated[list[PushableEvent], msgspec.Meta(min_length=1, max_length=16)]


class Webhook(msgspec.Struct, frozen=True, kw_only=True):
    """The registration as stored, and the answer to ``PUT`` (the only time the
    secret is shown)."""

    url: str
    events: list[str]
    secret: str


class WebhookRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The KV value of a registration."""

    device_id: str
    url: str
    events: list[str]
    secret: str
    created_at: str


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """One delivery's latest outcome."""

    webhook_id: str
    event_type: str
    session_id: str
    seq: int
    status: DeliveryStatus
    attempts: int
    at: str
    http_status: int | None = None
    error: str | None = None


class WebhookView(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/webhooks``: the registration (without its secret) and the last
    deliveries, newest first."""

    url: str
    events: list[str]
    created_at: str
    deliveries: list[Delivery]


class DeliveryLog(msgspec.Struct, frozen=True, kw_only=True):
    """The KV value holding a device's last deliveries."""

    deliveries: list[Delivery] = []


class OutboxJob(msgspec.Struct, frozen=True, kw_only=True):
    """One event to push to one device (published once per log event)."""

    device_id: str
    session_id: str
    seq: int
    event_id: str
    event_type: str
    body: msgspec.Raw
