"""Task plumbing shared by every service."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it has ended.

    The task's own ``CancelledError`` is absorbed; the caller's is not: if the
    task calling this is itself being cancelled (while it waited, or before),
    the ``CancelledError`` propagates. Any other exception the task ended with
    is raised here, so a failing background task is never silent.
    """
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        me = asyncio.current_task()
        if me is not None and me.cancelling():
            raise


async def cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> list[BaseException]:
    """Cancel every task and wait for all; returns what they failed with.

    Like :func:`cancel_and_wait`, the caller's own cancellation propagates
    (``gather`` raises it); the tasks' own ``CancelledError`` are not returned.
    """
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    return [
        r
        for r in results
        if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
    ]
