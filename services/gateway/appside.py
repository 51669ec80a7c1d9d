"""The App side of the gateway: stream tickets, CORS and the web client at /app."""

from __future__ import annotations

from aiohttp import web
from nats.js.client import JetStreamContext

from schemas.names import BusNames
from services.gateway.cors import setup_cors
from services.gateway.settings import GatewaySettings
from services.gateway.tickets import TICKETS, StreamTickets
from services.gateway.webapp import setup_web_app


async def add_app_side(
    app: web.Application,
    settings: GatewaySettings,
    js: JetStreamContext,
    names: BusNames,
    secret: bytes,
) -> None:
    """Declare the used-tickets bucket, then mount CORS and ``/app`` on ``app``."""
    ttl = settings.gateway_ticket_ttl_s
    app[TICKETS] = await StreamTickets.open(js, names, secret, ttl)
    setup_cors(app, settings.gateway_cors_origins)
    setup_web_app(app)
