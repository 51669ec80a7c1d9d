"""``eventually()``: returns the first truthy value, fails naming what it awaited."""

from __future__ import annotations

import pytest

from tests.support.eventually import eventually


async def test_returns_the_first_truthy_value_of_a_sync_probe() -> None:
    calls: list[int] = []

    def probe() -> int:
        calls.append(1)
        return len(calls) if len(calls) >= 3 else 0

    assert await eventually(probe, interval=0) == 3


async def test_awaits_an_async_probe() -> None:
    seen: list[str] = []

    async def probe() -> str:
        seen.append("x")
        return "".join(seen) if len(seen) == 2 else ""

    assert await eventually(probe, interval=0) == "xx"


async def test_times_out_with_what_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"waiting for the answer \(last: 0\)"):
        await eventually(lambda: 0, 0.05, what="the answer")
