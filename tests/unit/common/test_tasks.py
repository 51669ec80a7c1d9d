"""cancel_and_wait / cancel_all: the task's cancellation absorbed, the caller's not."""

from __future__ import annotations

import asyncio

import pytest

from services.common.tasks import cancel_all, cancel_and_wait


async def test_the_tasks_own_cancellation_is_absorbed() -> None:
    task = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled()


async def test_the_callers_cancellation_is_not_swallowed() -> None:
    stubborn_started = asyncio.Event()
    release = asyncio.Event()

    async def stubborn() -> None:
        stubborn_started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await release.wait()  # slow cleanup: the caller waits inside
            raise

    inner = asyncio.create_task(stubborn())
    await stubborn_started.wait()
    reached_after = []

    async def caller() -> None:
        await cancel_and_wait(inner)
        reached_after.append(True)  # must not run: the caller was cancelled

    outer = asyncio.create_task(caller())
    await asyncio.sleep(0)
    outer.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert reached_after == []
    assert inner.cancelled()


async def test_a_task_failure_is_raised_not_hidden() -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    task = asyncio.create_task(broken())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="boom"):
        await cancel_and_wait(task)


async def test_cancel_all_returns_failures_and_absorbs_cancellations() -> None:
    async def broken() -> None:
        raise ValueError("bad")

    failing = asyncio.create_task(broken())
    sleeping = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    errors = await cancel_all([failing, sleeping])
    assert [type(e) for e in errors] == [ValueError]
    assert sleeping.cancelled()
