"""Stream tickets: one-use, short-lived ``?ticket=`` credentials for ``EventSource``.

A browser's ``EventSource`` cannot send ``Authorization``, and a long-lived
device token must never sit in a URL (proxies and access logs keep URLs). A
ticket is ``t1.<session>.<device>.<expires>.<nonce>.<hmac>``: stateless, so
any gateway replica can check it, signed with a key derived from the device
secret (so a ticket is never a device token, nor the reverse). Single use
across replicas comes from JetStream KV: redeeming ``create()``s
``ticket.<nonce>`` in the gateway's idempotency bucket, which fails if any
replica redeemed it before. (That bucket, not one of its own: the gateway's
NATS permissions already cover it; a mark outlives its ticket, ~100 bytes for
the bucket's TTL.)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from datetime import UTC, datetime

from aiohttp import web
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from schemas.api import StreamTicket
from services.gateway.auth import authenticate
from services.gateway.errors import UnauthorizedError

PREFIX = "t1"
MARK_PREFIX = "ticket."  # idempotency keys are "<sid>.<digest>": never "ticket"
MAX_TTL_S = 60.0
_PART = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class TicketError(Exception):
    """A ticket is malformed, forged, expired, for another session, or used."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def _key(secret: bytes) -> bytes:
    return hmac.new(secret, b"agentbus stream ticket v1", hashlib.sha256).digest()


def _sign(key: bytes, body: str) -> str:
    mac = hmac.new(key, body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


class TicketCodec:
    """Issue and check tickets (pure; the one-use check is ``StreamTickets``)."""

    def __init__(self, secret: bytes, ttl_s: float = MAX_TTL_S) -> None:
        self._key = _key(secret)
        self.ttl_s = min(max(ttl_s, 1.0), MAX_TTL_S)

    def issue(
        self, session_id: str, device_id: str, now: float | None = None
    ) -> StreamTicket:
        """A fresh ticket for one device on one session."""
        expires = (time.time() if now is None else now) + self.ttl_s
        body = (
            f"{PREFIX}.{session_id}.{device_id}.{int(expires)}.{secrets.token_hex(16)}"
        )
        return StreamTicket(
            ticket=f"{body}.{_sign(self._key, body)}", expires_at=_rfc3339(int(expires))
        )

    def check(
        self, ticket: str, session_id: str, now: float | None = None
    ) -> tuple[str, str]:
        """(device, nonce) of a genuine, unexpired ticket for ``session_id``."""
        parts = ticket.split(".")
        if (
            len(parts) != 6
            or parts[0] != PREFIX
            or not all(map(_PART.match, parts[1:]))
        ):
            raise TicketError("malformed ticket")
        _, sid, device, expires, nonce, signature = parts
        expected = _sign(self._key, ".".join(parts[:5]))
        if not hmac.compare_digest(expected.encode(), signature.encode()):
            raise TicketError("bad signature")
        if sid != session_id:
            raise TicketError("ticket is for another session")
        if not expires.isdigit() or int(expires) < (
            time.time() if now is None else now
        ):
            raise TicketError("ticket expired")
        return device, nonce


class StreamTickets:
    """Tickets plus their one-use marks in a KV bucket shared by every replica."""

    def __init__(self, codec: TicketCodec, used: KeyValue) -> None:
        self.codec = codec
        self._used = used

    async def redeem(self, ticket: str, session_id: str) -> str:
        """The device of a valid, unused ticket, which is now used."""
        device, nonce = self.codec.check(ticket, session_id)
        try:
            await self._used.create(f"{MARK_PREFIX}{nonce}", b"1")
        except KeyWrongLastSequenceError:
            raise TicketError("ticket already used") from None
        return device


TICKETS = web.AppKey("agentbus_stream_tickets", StreamTickets)


async def authenticate_request(request: web.Request, secret: bytes) -> str:
    """The device: from ``Authorization``, or a ``?ticket=`` on an events route."""
    header = request.headers.get("Authorization")
    ticket = request.query.get("ticket")
    tickets = request.app.get(TICKETS)
    if header or ticket is None or tickets is None:
        return authenticate(secret, header)
    if request.match_info.route.name != "events":
        raise UnauthorizedError()
    try:
        return await tickets.redeem(ticket, request.match_info["sid"])
    except TicketError:
        raise UnauthorizedError() from None
