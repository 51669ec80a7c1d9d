"""``services.common.natsclient``: the cheaper header parser answers as nats.py's."""

from __future__ import annotations

import random

import pytest
from nats.aio.client import Client as NatsClient

from eventstore.jspublish import header_block
from eventstore.log import log_headers
from schemas.names import BusNames
from services.common import natsclient
from services.common.natsclient import Client

LOG_HEADERS = (
    b"Nats-Msg-Id: ev_01JABCDEFGHJKMNPQRSTVWXYZ0\r\n"
    b"Nats-Expected-Last-Subject-Sequence: 0\r\n"
    b"Nats-Expected-Last-Subject-Sequence-Subject: p.log.s_1.12.>\r\n"
    b"Agentbus-Seq: 12\r\nAgentbus-Type: agent.message.delta\r\n\r\n"
)
ODD = [
    b"",
    b"\r\n\r\n",
    b"no colon here\r\nA: 1\r\n",
    b"Bad Name: x\r\nGood: y\r\n",  # whitespace inside a name: skipped
    b"\x1cLead: x\r\nTrail\x1f: y\r\nTab\t: z\r\n",  # \x1c-\x1f are str spaces
    b"Caf\xc3\xa9: x\r\nV: caf\xc3\xa9 \xff\r\n",  # non-ASCII name; bad UTF-8 value
    b"Name:NoSpace\r\nName2:\tTabbed \r\n:empty name\r\n",
    b"Dup: 1\r\nDup: 2\r\nLone\nLF: v\r\nCR\rIn: v\r\n",
    b"Nats-Last-Consumer: 1016\r\nNats-Last-Stream: 1024\r\n\r\n",
]


@pytest.mark.parametrize("raw", [LOG_HEADERS, *ODD])
def test_the_same_headers_as_nats_py(raw: bytes) -> None:
    assert Client._parse_header_lines(raw) == NatsClient._parse_header_lines(raw)


def test_random_header_blocks_parse_the_same() -> None:
    rng = random.Random(15)
    alphabet = b"aZ09-_:. \t\r\n\x1c\x1f\x0b\x85\xc3\xa9\xff"
    for _ in range(3000):
        raw = bytes(rng.choice(alphabet) for _ in range(rng.randrange(60)))
        assert Client._parse_header_lines(raw) == NatsClient._parse_header_lines(raw)


def test_a_log_message_s_headers() -> None:
    parsed = Client._parse_header_lines(LOG_HEADERS)
    assert parsed["Agentbus-Seq"] == "12"
    assert parsed["Nats-Expected-Last-Subject-Sequence-Subject"] == "p.log.s_1.12.>"
    assert len(parsed) == 5


def test_the_log_layout_takes_the_one_match_path() -> None:
    assert natsclient._LOG_LAYOUT.fullmatch(LOG_HEADERS) is not None


def test_log_layout_blocks_parse_the_same_whatever_their_values() -> None:
    rng = random.Random(7)
    alphabet = "aZ09-_.:>* \t\x0b\x1c\xe9"
    for _ in range(3000):
        values = [
            "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 10)))
            for _ in natsclient._LOG_NAMES
        ]
        pairs = zip(natsclient._LOG_NAMES, values, strict=True)
        lines = [f"{n}: {v}\r\n" for n, v in pairs]
        raw = "".join(lines).encode() + b"\r\n"
        assert Client._parse_header_lines(raw) == NatsClient._parse_header_lines(raw)


def test_the_headers_the_log_appends_take_the_one_match_path() -> None:
    """If the append path's headers change order or names, this fails (the
    reader would silently fall back to the slower loop)."""
    headers = log_headers(BusNames("p"), "s_1", 12, "agent.message.delta", "ev_1")
    block = header_block(headers)
    assert block.startswith(b"NATS/1.0\r\n")
    raw = block[len(b"NATS/1.0\r\n") :]
    assert natsclient._LOG_LAYOUT.fullmatch(raw) is not None
    assert Client._parse_header_lines(raw) == headers
