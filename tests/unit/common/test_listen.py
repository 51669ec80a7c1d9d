"""``split_listen``: the one parser of ``HOST:PORT`` listen addresses."""

from __future__ import annotations

import pytest

from services.common.listen import split_listen


def test_host_and_port() -> None:
    assert split_listen("0.0.0.0:8080") == ("0.0.0.0", 8080)


def test_empty_host_is_loopback() -> None:
    assert split_listen(":0") == ("127.0.0.1", 0)


@pytest.mark.parametrize("bad", ["8080", "host:", "host:http", "host:70000"])
def test_malformed_address_names_itself(bad: str) -> None:
    with pytest.raises(ValueError, match=repr(bad)):
        split_listen(bad)
