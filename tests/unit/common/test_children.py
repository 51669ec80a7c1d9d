"""``signal_child``: signals a live child; leaves its exit status to asyncio."""

from __future__ import annotations

import asyncio
import signal

from services.common.children import signal_child


async def test_a_running_child_is_killed_and_its_status_is_the_signal() -> None:
    proc = await asyncio.create_subprocess_exec("sleep", "60")
    signal_child(proc)
    assert await proc.wait() == -signal.SIGKILL


async def test_a_child_that_exited_keeps_its_own_status() -> None:
    proc = await asyncio.create_subprocess_exec("sh", "-c", "exit 7")
    assert await proc.wait() == 7
    signal_child(proc)  # reaped already: nothing is signalled, nothing raised
    signal_child(proc, signal.SIGTERM)
    assert proc.returncode == 7
