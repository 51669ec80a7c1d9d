"""The supervisor's restart back-off doubles on crash loops and resets after health."""

from __future__ import annotations

import asyncio

import pytest

from services.launcher.supervisor import ServiceSpec, Supervisor

pytestmark = pytest.mark.timeout(30)


async def _delays_after(argv: list[str], crashes: int, healthy_s: float) -> list[float]:
    spec = ServiceSpec(name="child", argv=argv, env={})
    enough = asyncio.Event()

    def changed() -> None:
        if spec.restarts >= crashes:
            enough.set()

    sup = Supervisor(0.01, 0.08, healthy_s=healthy_s, on_change=changed)
    task = sup.start(spec)
    await asyncio.wait_for(enough.wait(), 20)
    await sup.stop()
    await task
    return sup.delays[:crashes]


async def test_a_crash_loop_doubles_the_delay_up_to_the_max() -> None:
    delays = await _delays_after(["sh", "-c", "exit 3"], 5, healthy_s=60)
    assert delays == [0.01, 0.02, 0.04, 0.08, 0.08]


async def test_a_child_that_ran_healthy_restarts_after_the_base_delay() -> None:
    delays = await _delays_after(["sh", "-c", "sleep 0.2; exit 3"], 4, healthy_s=0.1)
    assert delays == [0.01, 0.01, 0.01, 0.01]
