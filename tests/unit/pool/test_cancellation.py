"""Pool loops end when cancelled even if a library swallowed the CancelledError."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from services.pool.cancellation import cancel_requested, raise_if_cancelled


async def test_a_loop_ends_after_a_library_swallowed_its_cancel() -> None:
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while not cancel_requested():
            rounds += 1
            with contextlib.suppress(asyncio.CancelledError):  # the library's bug
                await asyncio.sleep(0.01)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.wait_for(task, 2)
    assert rounds > 0
    assert not task.cancelled()


async def test_a_cancel_turned_into_timeout_is_raised_again() -> None:
    async def fetch() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            with contextlib.suppress(TimeoutError):
                raise TimeoutError from None  # what the race in wait_for does
            raise_if_cancelled()

    task = asyncio.create_task(fetch())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
