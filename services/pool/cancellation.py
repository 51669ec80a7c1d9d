"""Loops that stop when cancelled, even if a library swallowed the cancel.

On Python 3.11, ``asyncio.wait_for`` (used inside nats.py for requests, fetches
and KV watchers) can turn a cancellation that races its timeout into a
``TimeoutError``; a loop that catches that and goes on would never end. The
task still counts the request (``Task.cancelling()``), so loops check it.
"""

from __future__ import annotations

import asyncio


def cancel_requested() -> bool:
    """The current task was asked to stop (whether or not it saw the error)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def raise_if_cancelled() -> None:
    """Re-raise a cancellation a library turned into something else."""
    if cancel_requested():
        raise asyncio.CancelledError
