"""``PUT / GET / DELETE /v1/webhooks``: a device's push registration.

The gateway only stores the registration (the notifier delivers). A receiver
on a loopback / private / link-local address is refused with 422 unless
``AGENTBUS_WEBHOOK_ALLOW_PRIVATE=1`` — the notifier checks again on delivery.
"""

from __future__ import annotations

from aiohttp import web

from schemas.webhooks import PutWebhook, Webhook, WebhookRecord, WebhookView
from services.common.addresses import AddressRefusedError, check_url
from services.common.webhooks import WebhookStore, new_secret, now_iso
from services.gateway.bodies import decode_body
from services.gateway.errors import GatewayError, InvalidRequestError


class WebhookNotFoundError(GatewayError):
    """The device has no webhook registered (404)."""

    def __init__(self) -> None:
        super().__init__(404, "webhook_not_found", "no webhook is registered")


class WebhookRoutes:
    """The three handlers, over the webhooks KV bucket."""

    def __init__(self, store: WebhookStore, *, allow_private: bool) -> None:
        self._store = store
        self._allow_private = allow_private

    async def put(self, request: web.Request, device_id: str) -> Webhook:
        """Register (or replace) the device's webhook; a new secret each time."""
        body = await decode_body(request, PutWebhook)
        try:
            await check_url(body.url, allow_private=self._allow_private)
        except AddressRefusedError as exc:
            raise InvalidRequestError(exc.reason, "$.url") from None
        events: list[str] = sorted(set(body.events))
        record = WebhookRecord(
            device_id=device_id,
            url=body.url,
            events=events,
            secret=new_secret(),
            created_at=now_iso(),
        )
        await self._store.put(record)
        return Webhook(url=record.url, events=events, secret=record.secret)

    async def get(self, device_id: str) -> WebhookView:
        """The registration (without its secret) and its last deliveries."""
        record = await self._store.get(device_id)
        if record is None:
            raise WebhookNotFoundError()
        return WebhookView(
            url=record.url,
            events=record.events,
            created_at=record.created_at,
            deliveries=await self._store.deliveries(device_id),
        )

    async def delete(self, device_id: str) -> None:
        """Remove it (idempotent: deleting nothing is also 204)."""
        await self._store.delete(device_id)
