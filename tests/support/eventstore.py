"""Event-store test pieces shared by contract and integration tests: settings, a
local projector, scripted sessions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from nats.aio.client import Client

from eventstore.log import JetStreamLog, StoredEvent
from eventstore.projection import SqliteProjection
from eventstore.projector import Projector
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.events import (
    AgentMessage,
    Payload,
    SessionCreated,
    ToolCall,
    ToolResult,
    TurnEnded,
    TurnStarted,
    UserPrompt,
)
from schemas.names import BusNames


def settings_for(
    url: str, prefix: str, db: Path, **limits: float | int
) -> EventStoreSettings:
    """Settings of one test: its own bus prefix (hence stream) and SQLite file."""
    return EventStoreSettings(
        nats_url=url, bus_prefix=prefix, projector_db=str(db), **limits
    )


async def open_log(nc: Client, settings: EventStoreSettings) -> JetStreamLog:
    """Declare the test's log stream and return a log on it."""
    names = BusNames(settings.bus_prefix)
    await ensure_log_stream(nc.jetstream(), names, settings)
    return JetStreamLog(nc, names)


def script(n: int) -> list[Payload]:
    """A plausible session of ``n`` events: created, then prompt/turn cycles."""
    cycle: list[Payload] = [
        UserPrompt(text="list files", turn_id="t"),
        TurnStarted(turn_id="t", prompt_seq=0),
        ToolCall(turn_id="t", call_id="c", tool="bash", args={"cmd": "ls"}),
        ToolResult(call_id="c", ok=True, output="a.txt\n", exit_code=0),
        AgentMessage(turn_id="t", text="one file: a.txt"),
        TurnEnded(turn_id="t", stop_reason="end_turn"),
    ]
    out: list[Payload] = [SessionCreated(device_id="dev1", title="demo")]
    while len(out) < n:
        out.append(cycle[(len(out) - 1) % len(cycle)])
    return out[:n]


async def append_script(
    log: JetStreamLog, session_id: str, n: int
) -> list[StoredEvent]:
    """Append ``script(n)`` to a session; the events as stored."""
    return [await log.append(session_id, p, actor="gateway") for p in script(n)]


class LocalProjector:
    """A projector running in the test's process (the process form is tested apart)."""

    def __init__(
        self,
        nc: Client,
        names: BusNames,
        write: SqliteProjection,
        read: SqliteProjection,
    ) -> None:
        self.names = names
        self.projection = read
        self.projector = Projector(nc, write, read, names, batch=64)
        self._nc = nc

    async def sync(self, deadline_s: float = 10.0) -> None:
        """Copy until SQLite holds everything the stream holds now."""
        info = await self._nc.jetstream().stream_info(self.names.log_stream)
        target = info.state.last_seq
        deadline = time.monotonic() + deadline_s
        while await self.projection.position(self.names.log_stream) < target:
            assert time.monotonic() < deadline, "projector did not catch up"
            await self.projector.step(wait_s=0.2)


@asynccontextmanager
async def local_projector(
    nc: Client, settings: EventStoreSettings, *, serve: bool = False
) -> AsyncIterator[LocalProjector]:
    """Open the SQLite file, prepare the consumer; optionally serve range reads."""
    names = BusNames(settings.bus_prefix)
    write = await SqliteProjection.open(settings.projector_db)
    read = await SqliteProjection.open(settings.projector_db, readonly=True)
    try:
        local = LocalProjector(nc, names, write, read)
        await local.projector.prepare()
        sub = None
        if serve:
            sub = await nc.subscribe(names.projector_read, cb=local.projector.serve)
        try:
            yield local
        finally:
            if sub is not None:
                await sub.unsubscribe()
    finally:
        await read.close()
        await write.close()


async def dedupe_window_elapsed(nc: Client, names: BusNames, window_s: float) -> None:
    """Wait until the server itself no longer dedupes a probe id (bounded)."""
    js = nc.jetstream()
    subject = names.log_subject("probe", 1, "probe")
    first = await js.publish(subject, b"{}", headers={"Nats-Msg-Id": "probe"})
    deadline = time.monotonic() + window_s + 10
    while time.monotonic() < deadline:
        ack = await js.publish(subject, b"{}", headers={"Nats-Msg-Id": "probe"})
        if not ack.duplicate:
            assert ack.seq != first.seq
            return
        await asyncio.sleep(0.1)  # polling the server's window, not synchronising
    raise AssertionError("dedupe window never elapsed")
