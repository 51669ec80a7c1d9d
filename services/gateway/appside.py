"""The App side of the gateway: stream tickets, CORS and the web client at /app."""

from __future__ import annotations

from aiohttp import web
from nats.js.kv import KeyValue

from services.gateway.cors import setup_cors
from services.gateway.settings import GatewaySettings
from services.gateway.tickets import TICKETS, StreamTickets, TicketCodec
from services.gateway.webapp import setup_web_app


def add_app_side(
    app: web.Application,
    settings: GatewaySettings,
    used: KeyValue,
    secret: bytes,
) -> None:
    """Stream tickets (one-use marks in ``used``), CORS and ``/app`` on ``app``."""
    codec = TicketCodec(secret, settings.gateway_ticket_ttl_s)
    app[TICKETS] = StreamTickets(codec, used)
    setup_cors(app, settings.gateway_cors_origins)
    setup_web_app(app)
