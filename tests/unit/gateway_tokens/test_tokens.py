"""Device tokens: HMAC-signed, scoped to one device, expiring."""

from __future__ import annotations

import stat

import pytest

from services.gateway.tokens import TokenError, issue, load_secret, verify


def test_a_token_names_its_device(tmp_path):
    secret = load_secret(tmp_path, None)
    assert verify(secret, issue(secret, "phone-1")) == "phone-1"


def test_the_generated_secret_is_private_and_reused(tmp_path):
    first = load_secret(tmp_path, None)
    assert load_secret(tmp_path, None) == first
    assert stat.S_IMODE((tmp_path / "device_secret").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # forged signature
        lambda t: t.replace("v1.phone", "v1.other"),  # another device
        lambda t: "garbage",
        lambda t: "",
    ],
)
def test_tampered_tokens_are_refused(mangle):
    secret = b"s" * 32
    with pytest.raises(TokenError):
        verify(secret, mangle(issue(secret, "phone")))


def test_expired_token_is_refused():
    secret = b"s" * 32
    token = issue(secret, "phone", ttl_s=10, now=1000)
    assert verify(secret, token, now=1005) == "phone"
    with pytest.raises(TokenError):
        verify(secret, token, now=1011)


def test_token_from_another_secret_is_refused():
    with pytest.raises(TokenError):
        verify(b"a" * 32, issue(b"b" * 32, "phone"))
