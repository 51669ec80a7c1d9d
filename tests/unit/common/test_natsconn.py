"""``nats_servers``: the URL setting as nats.py's list of servers."""

from __future__ import annotations

import pytest

from services.common.natsconn import nats_servers


def test_one_url_is_a_list_of_one() -> None:
    assert nats_servers("nats://127.0.0.1:4222") == ["nats://127.0.0.1:4222"]


def test_a_comma_separated_url_is_every_node_in_order() -> None:
    url = "nats://a:4222, nats://b:4223,nats://c:4224"
    assert nats_servers(url) == ["nats://a:4222", "nats://b:4223", "nats://c:4224"]


def test_an_empty_url_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="no NATS server URL"):
        nats_servers(" , ")
