"""E2B network fields → NetworkSpec, and the nftables program they become."""

from __future__ import annotations

import pytest

from services.sandboxhost.network import (
    SLIRP_DNS,
    NetworkError,
    NetworkSpec,
    from_request,
    ruleset,
)


def test_defaults_and_allow_internet_access() -> None:
    assert from_request({}, "internet") == NetworkSpec(mode="internet")
    assert from_request({}, "none").mode == "none"
    assert from_request({"allow_internet_access": False}, "internet").mode == "none"
    assert from_request({"allow_internet_access": True}, "none").mode == "none"


def test_no_internet_but_allow_out_denies_everything_else() -> None:
    spec = from_request(
        {"allow_internet_access": False, "network": {"allowOut": ["1.2.3.4"]}},
        "internet",
    )
    assert spec == NetworkSpec(
        mode="internet", allow_out=["1.2.3.4"], deny_out=["0.0.0.0/0"]
    )


@pytest.mark.parametrize(
    "body",
    [
        {"network": []},
        {"network": {"allowOut": "1.2.3.4"}},
        {"network": {"denyOut": [1]}},
        {"network": {"allowOut": ["bad host!"]}},
        {"network": {"allowOut": ["a" * 254]}},
        {"allow_internet_access": "no"},
    ],
)
def test_malformed_fields_are_refused_by_name(body: dict[str, object]) -> None:
    with pytest.raises(NetworkError):
        from_request(body, "internet")


def test_ruleset_order_allow_then_deny_then_host_and_private() -> None:
    spec = NetworkSpec(
        allow_out=["192.0.2.7/32", "*.example.com"], deny_out=["203.0.113.0/24"]
    )
    program = ruleset(spec, ["192.0.2.2"])
    lines = [line.strip() for line in program.splitlines()]
    allow = lines.index("ip daddr { 192.0.2.7/32 } accept")
    deny = lines.index("ip daddr { 203.0.113.0/24 } reject")
    blocked = next(i for i, line in enumerate(lines) if "192.0.2.2" in line)
    assert lines.index('oif "lo" accept') < allow < deny < blocked
    assert f"ip daddr {SLIRP_DNS} udp dport 53 accept" in lines
    assert "10.0.0.0/8" in lines[blocked]
    assert "169.254.0.0/16" in lines[blocked]
    assert "example.com" not in program  # wildcards cannot become addresses
    assert "meta nfproto ipv6 reject" in lines


def test_host_names_resolve_to_their_addresses() -> None:
    program = ruleset(NetworkSpec(allow_out=["localhost"]), [])
    assert "ip daddr { 127.0.0.1 } accept" in program
