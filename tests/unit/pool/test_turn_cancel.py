"""Stop ends a streaming turn even when the publish it lands in swallows it.

On Python 3.11 ``asyncio.wait_for`` (inside nats.py's publish) returns the
answer instead of raising when a cancel races it; a turn that did not look
again streamed to the end after Stop (seen under load: hundreds of deltas).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from eventstore.reader import StoredEvent
from schemas.events import AgentMessageDelta
from services.pool.agent import Turn
from services.pool.conversation import Conversation
from services.pool.models.scripted import ScriptedModel
from services.pool.settings import PoolSettings

LONG = " ".join(f"w{i}" for i in range(5000))


class Binding:
    @contextlib.asynccontextmanager
    async def activity(self, kind: str) -> AsyncIterator[None]:
        yield

    def mark_stale(self) -> None:
        pass


class SwallowingPort:
    """A session whose every append swallows a cancel that lands in it."""

    def __init__(self) -> None:
        self.conv = Conversation()
        script = json.dumps({"script": [{"say": LONG}]})
        self.conv.messages = [{"role": "user", "content": script}]
        self.binding: Any = Binding()
        self.model = ScriptedModel(token_delay_s=0.001)
        self.settings = PoolSettings(pool_delta_interval_s=0.0)
        self.payloads: list[object] = []
        self.streaming = asyncio.Event()

    async def append(self, payload: object) -> StoredEvent:
        self.payloads.append(payload)
        if isinstance(payload, AgentMessageDelta):
            self.streaming.set()
        with contextlib.suppress(asyncio.CancelledError):  # wait_for's race
            await asyncio.sleep(0.001)
        return StoredEvent(len(self.payloads), "x", b"")

    async def caught_up(self, seq: int) -> None:
        pass

    async def answer(self, request_id: str) -> str:
        raise AssertionError("no approvals here")


async def test_a_cancel_swallowed_by_a_publish_still_stops_the_turn() -> None:
    port = SwallowingPort()
    task = asyncio.create_task(Turn(port, "t1").steps(resume=False))  # type: ignore[arg-type]
    await asyncio.wait_for(port.streaming.wait(), 10)
    # Cancel while the turn is inside an append: the append swallows it.
    while True:
        await asyncio.sleep(0)
        if port.payloads and isinstance(port.payloads[-1], AgentMessageDelta):
            break
    streamed = len(port.payloads)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done, "the turn went on streaming after Stop"
    assert task.cancelled()
    assert len(port.payloads) <= streamed + 1  # at most the append under way
