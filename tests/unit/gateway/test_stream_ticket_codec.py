"""Stream tickets are bound to a session, expire, and cannot be forged or reused as
device tokens (the one-use check against JetStream is in the integration tests)."""

from __future__ import annotations

import pytest

from services.gateway.tickets import MAX_TTL_S, TicketCodec, TicketError
from services.gateway.tokens import TokenError, issue, verify

SECRET = b"unit-secret"


def test_a_ticket_names_its_device_and_a_fresh_nonce():
    codec = TicketCodec(SECRET)
    a = codec.issue("s_1", "phone", now=1000.0)
    b = codec.issue("s_1", "phone", now=1000.0)
    device, nonce_a = codec.check(a.ticket, "s_1", now=1000.0)
    _, nonce_b = codec.check(b.ticket, "s_1", now=1000.0)
    assert device == "phone"
    assert nonce_a != nonce_b
    assert a.expires_at == "1970-01-01T00:17:40Z"


def test_the_lifetime_is_capped_at_sixty_seconds():
    codec = TicketCodec(SECRET, ttl_s=3600)
    assert codec.ttl_s == MAX_TTL_S
    t = codec.issue("s_1", "phone", now=1000.0).ticket
    codec.check(t, "s_1", now=1060.0)
    with pytest.raises(TicketError, match="expired"):
        codec.check(t, "s_1", now=1061.0)


def test_another_session_or_another_secret_is_refused():
    t = TicketCodec(SECRET).issue("s_1", "phone").ticket
    with pytest.raises(TicketError, match="another session"):
        TicketCodec(SECRET).check(t, "s_2")
    with pytest.raises(TicketError, match="bad signature"):
        TicketCodec(b"other").check(t, "s_1")


@pytest.mark.parametrize(
    "ticket", ["", "t1", "t1.s_1.phone.1.n", "t1.s_1.ph.one.1.n.sig", "t1.s 1.p.1.n.s"]
)
def test_malformed_tickets_are_refused(ticket):
    with pytest.raises(TicketError, match="malformed"):
        TicketCodec(SECRET).check(ticket, "s_1")


def test_tickets_and_device_tokens_do_not_stand_in_for_each_other():
    codec = TicketCodec(SECRET)
    ticket = codec.issue("s_1", "phone").ticket
    with pytest.raises(TokenError):
        verify(SECRET, ticket)
    with pytest.raises(TicketError):
        codec.check(issue(SECRET, "phone"), "s_1")
