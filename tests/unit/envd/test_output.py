"""Output exactness, caps, and UTF-8 split across chunk boundaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.envd.output import (
    OutputChunk,
    OutputCollector,
    Stream,
    TextFeed,
    Utf8Stream,
    utf8_head,
    utf8_tail,
)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    out, pos = [], 0
    for cut in sorted(set(c % (len(data) + 1) for c in cuts)):
        out.append(data[pos:cut])
        pos = cut
    out.append(data[pos:])
    return out


@given(st.text(), st.lists(st.integers(min_value=0, max_value=10_000), max_size=20))
def test_utf8_stream_decodes_split_characters_whole(text: str, cuts: list[int]) -> None:
    data = text.encode()
    decoder = Utf8Stream()
    got = "".join(decoder.feed(part) for part in _split(data, cuts)) + decoder.flush()
    assert got == text


def test_character_split_mid_sequence_never_yields_replacement() -> None:
    decoder = Utf8Stream()
    first = decoder.feed(b"caf\xc3")
    second = decoder.feed(b"\xa9 \xf0\x9f")
    third = decoder.feed(b"\x98\x80")
    assert (first, second, third) == ("caf", "é ", "😀")


@given(
    st.lists(st.binary(max_size=50), max_size=20),
    st.integers(min_value=0, max_value=200),
)
def test_collector_keeps_exact_prefix_and_full_log(
    chunks: list[bytes], cap: int
) -> None:
    collector = OutputCollector(cap=cap, spill_limit=1 << 20)
    for chunk in chunks:
        collector.add("stdout", chunk)
    whole = b"".join(chunks)
    assert bytes(collector.stdout) == whole[:cap]
    assert collector.truncated == (len(whole) > cap)
    assert collector.spill_bytes() == whole
    assert collector.total == len(whole)
    assert collector.tail() == whole[-cap:] if cap else collector.tail() == b""


def test_collector_interleaves_streams_in_the_spill_log() -> None:
    collector = OutputCollector(cap=2, spill_limit=100)
    collector.add("stdout", b"out1")
    collector.add("stderr", b"err1")
    collector.add("stdout", b"out2")
    assert (bytes(collector.stdout), bytes(collector.stderr)) == (b"ou", b"er")
    assert collector.spill_bytes() == b"out1err1out2"


def test_collector_stops_logging_past_the_spill_limit() -> None:
    collector = OutputCollector(cap=1, spill_limit=5)
    collector.add("stdout", b"abc")
    collector.add("stdout", b"def")
    assert collector.spill_bytes() == b"abc"
    assert not collector.log_complete


@given(st.text(min_size=1), st.integers(min_value=0, max_value=400))
def test_utf8_head_and_tail_cut_on_character_boundaries(text: str, cut: int) -> None:
    data = text.encode()
    head = utf8_head(data[:cut])
    tail = utf8_tail(data[cut:])
    head.decode()  # raises if a character was cut
    tail.decode()
    assert data[:cut].startswith(head)
    assert len(data[:cut]) - len(head) < 4
    assert data[cut:].endswith(tail)
    assert len(data[cut:]) - len(tail) < 4


@given(st.text(), st.lists(st.integers(min_value=0, max_value=10_000), max_size=20))
async def test_text_feed_delivers_exact_text_per_stream_under_any_chunking(
    text: str, cuts: list[int]
) -> None:
    got: dict[str, list[str]] = {"stdout": [], "stderr": []}

    async def on_text(stream: Stream, part: str) -> None:
        assert part
        got[stream].append(part)

    feed = TextFeed(on_text)
    data = text.encode()
    for piece in _split(data, cuts):
        await feed.feed(OutputChunk("stdout", piece))
    await feed.flush()
    assert "".join(got["stdout"]) == text
    assert got["stderr"] == []
