"""``eventually()``: the one way tests wait for a condition they cannot await.

Prefer awaiting an event (a log tail, an ``asyncio.Condition``); poll only what
has no event to wait on (another process's file, a remote state). The probe may
be sync or async; its first truthy value is returned. Past the timeout the test
fails with an ``AssertionError`` naming what it waited for and the last value
seen, so a failure says where it was stuck.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

INTERVAL_S = 0.02


async def eventually(
    probe: Callable[[], T | Awaitable[T]],
    timeout: float = 10.0,
    *,
    what: str | None = None,
    interval: float = INTERVAL_S,
) -> T:
    """Call ``probe`` until it returns something truthy; return that value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if loop.time() >= deadline:
            name = what or getattr(probe, "__name__", "condition")
            raise AssertionError(
                f"timed out after {timeout}s waiting for {name} (last: {value!r})"
            )
        await asyncio.sleep(interval)
