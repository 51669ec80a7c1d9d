"""Delta coalescing: tens per second, kinds in order, nothing held past the interval."""

from __future__ import annotations

import asyncio

from services.pool.coalesce import DeltaCoalescer


class Sink:
    def __init__(self) -> None:
        self.out: list[tuple[str, str]] = []
        self.changed = asyncio.Event()

    async def emit(self, kind: str, text: str) -> None:
        self.out.append((kind, text))
        self.changed.set()


async def test_a_burst_of_tokens_becomes_a_few_events_with_the_exact_text() -> None:
    sink = Sink()
    co = DeltaCoalescer(sink.emit, interval_s=10.0)
    for i in range(500):
        await co.add("message", f"t{i} ")
    await co.close()
    assert len(sink.out) == 2  # the first token at once, the rest at the end
    assert "".join(t for _, t in sink.out) == "".join(f"t{i} " for i in range(500))


async def test_a_change_of_kind_flushes_first_so_order_is_kept() -> None:
    sink = Sink()
    co = DeltaCoalescer(sink.emit, interval_s=10.0)
    tokens = [("thought", "a"), ("thought", "b"), ("message", "c"), ("message", "d")]
    for kind, text in [*tokens, ("thought", "e")]:
        await co.add(kind, text)
    await co.close()
    assert sink.out == [
        ("thought", "a"),
        ("thought", "b"),
        ("message", "cd"),
        ("thought", "e"),
    ]


async def test_a_tail_left_by_a_paused_stream_goes_out_after_the_interval() -> None:
    sink = Sink()
    co = DeltaCoalescer(sink.emit, interval_s=0.05)
    await co.add("message", "first")
    sink.changed.clear()
    await co.add("message", " second")
    await asyncio.wait_for(sink.changed.wait(), 2)
    assert sink.out == [("message", "first"), ("message", " second")]
    await co.close()


async def test_drop_forgets_the_buffer_and_waits_for_a_flush_under_way() -> None:
    release = asyncio.Event()
    out: list[str] = []

    async def slow_emit(kind: str, text: str) -> None:
        await release.wait()
        out.append(text)

    co = DeltaCoalescer(slow_emit, interval_s=10.0)
    first = asyncio.create_task(co.add("message", "sent "))  # flushes at once
    await asyncio.sleep(0)  # let the flush take the lock
    await co.add("message", "buffered")
    drop = asyncio.create_task(co.drop())
    await asyncio.sleep(0)
    assert not drop.done()  # waits for the flush holding the lock
    release.set()
    await asyncio.wait_for(asyncio.gather(first, drop), 5)
    await co.close()
    assert out == ["sent "]
