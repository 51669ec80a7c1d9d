"""Live command output: coalesced, bounded per event and per call, best effort."""

from __future__ import annotations

import asyncio

from services.pool.live import MAX_EVENT_CHARS, LiveOutput


class Sink:
    def __init__(self, fail_after: int | None = None) -> None:
        self.out: list[tuple[str, str]] = []
        self.fail_after = fail_after

    async def emit(self, stream: str, text: str) -> None:
        if self.fail_after is not None and len(self.out) >= self.fail_after:
            raise ConnectionError("bus gone")
        self.out.append((stream, text))


async def test_many_small_chunks_become_few_events_with_the_exact_text() -> None:
    sink = Sink()
    live = LiveOutput(sink.emit, limit=1 << 20, interval_s=10.0)
    lines = [f"line {i}\n" for i in range(500)]  # < MAX_EVENT_CHARS
    for line in lines:
        await live.add("stdout", line)
    await live.close()
    assert len(sink.out) == 2  # the first chunk at once, the rest on close
    assert "".join(t for _, t in sink.out) == "".join(lines)


async def test_events_are_bounded_in_size_and_the_call_in_total() -> None:
    sink = Sink()
    live = LiveOutput(sink.emit, limit=20_000, interval_s=10.0)
    await live.add("stdout", "a")
    await live.add("stdout", "b" * 50_000)
    await live.add("stdout", "c" * 10)
    await live.close()
    text = "".join(t for _, t in sink.out)
    assert text == "a" + "b" * 19_999
    assert all(len(t) <= MAX_EVENT_CHARS for _, t in sink.out)
    assert live.sent_chars == 20_000


async def test_a_change_of_stream_flushes_so_order_is_kept() -> None:
    sink = Sink()
    live = LiveOutput(sink.emit, limit=1000, interval_s=10.0)
    for stream, text in [("stdout", "a"), ("stdout", "b"), ("stderr", "c")]:
        await live.add(stream, text)
    await live.add("stdout", "d")
    await live.close()
    assert sink.out == [
        ("stdout", "a"),
        ("stdout", "b"),
        ("stderr", "c"),
        ("stdout", "d"),
    ]


async def test_a_failing_append_stops_the_stream_without_raising() -> None:
    sink = Sink(fail_after=1)
    live = LiveOutput(sink.emit, limit=1000, interval_s=0.0)
    for text in "abcd":
        await live.add("stdout", text)
    await live.close()
    assert sink.out == [("stdout", "a")]


async def test_discard_drops_the_buffer_and_the_waiting_timer() -> None:
    sink = Sink()
    live = LiveOutput(sink.emit, limit=1000, interval_s=10.0)
    await live.add("stdout", "first")
    await live.add("stdout", "held")
    live.discard()
    await live.add("stdout", "after")
    await asyncio.sleep(0)  # the cancelled timer task finishes
    await live.close()
    assert sink.out == [("stdout", "first")]
