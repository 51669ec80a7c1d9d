"""Cancelling ``EnvdClient.run`` at any point after the request kills the command."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from services.envd import EnvdClient, OutputChunk

_LOOPS = 20
# Count live processes whose command line contains a marker; the [x] trick keeps
# the counting pipeline itself from matching.
_COUNT = (
    "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"
    " | grep -c '^[{first}]{rest}' || true"
)


def _marker() -> tuple[str, str]:
    """A unique ``sleep`` duration (so the count sees only this test's commands)."""
    n = 30 + int(uuid.uuid4().int % 100_000) / 10_000
    return f"sleep {n}", _COUNT.format(first="s", rest=f"leep {n}")


async def _live(client: EnvdClient, count_cmd: str) -> int:
    return int((await client.run(count_cmd)).stdout.strip() or b"0")


async def _survivors(client: EnvdClient, count_cmd: str, within_s: float) -> int:
    """Matching processes left once they had ``within_s`` to disappear."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while (n := await _live(client, count_cmd)) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return n


async def _cancel_after_yields(client: EnvdClient, cmd: str, yields: int) -> None:
    task = asyncio.create_task(client.run(cmd))
    for _ in range(yields):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)


async def test_cancel_while_the_start_request_opens_leaves_no_process(
    client: EnvdClient,
) -> None:
    sleep, count = _marker()
    # 0 yields: cancelled before the request is sent; 1..12: at every step of
    # sending the request, waiting for its headers and for the start event.
    for _ in range(_LOOPS):
        for yields in (0, 1, 2, 3, 4, 6, 8, 12):
            await _cancel_after_yields(client, f"{sleep}; {sleep}", yields)
    assert await _survivors(client, count, within_s=3) == 0


async def test_cancel_after_the_start_event_leaves_no_process(
    client: EnvdClient,
) -> None:
    sleep, count = _marker()
    for _ in range(_LOOPS):
        began = asyncio.Event()

        async def on_output(chunk: OutputChunk, began: asyncio.Event = began) -> None:
            began.set()

        task = asyncio.create_task(
            client.run(f"echo go; {sleep} & {sleep}; wait", on_output=on_output)
        )
        await asyncio.wait_for(began.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
    assert await _survivors(client, count, within_s=3) == 0


async def test_concurrent_cancels_at_staggered_points_leave_no_process(
    client: EnvdClient,
) -> None:
    sleep, count = _marker()
    for _ in range(_LOOPS // 4):
        tasks = [asyncio.create_task(client.run(sleep)) for _ in range(8)]
        for task in tasks:
            task.cancel()
            await asyncio.sleep(0)
        for task in tasks:
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
    assert await _survivors(client, count, within_s=3) == 0


async def test_a_second_cancel_does_not_stop_the_kill(client: EnvdClient) -> None:
    sleep, count = _marker()
    for yields in range(8):
        task = asyncio.create_task(client.run(sleep))
        for _ in range(yields):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
    assert await _survivors(client, count, within_s=5) == 0
