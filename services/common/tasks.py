"""Task plumbing shared by every service."""

from __future__ import annotations

import asyncio
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
