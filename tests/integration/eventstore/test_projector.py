"""The projector: exactly-once copies across its own crash, dead letters, fallback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from eventstore.errors import RangeUnavailableError
from eventstore.index import SessionIndex
from eventstore.log import JetStreamLog
from eventstore.projection import ProjectionError, SqliteProjection
from eventstore.projector import dead_letter_subject
from eventstore.reader import SEQ_HEADER, TYPE_HEADER
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.events import AgentMessage, UserPrompt
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess
from services.projector.service import run
from tests.support.eventstore import (
    append_script,
    local_projector,
    open_log,
    settings_for,
)
from tests.support.eventually import eventually

ROOT = Path(__file__).resolve().parents[3]


class ProjectorProcess:
    """``agentbus projector`` as its own OS process (so it can be SIGKILLed)."""

    def __init__(self, settings: EventStoreSettings, log_file: Path) -> None:
        self._settings = settings
        self._log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "AGENTBUS_BUS_PREFIX": self._settings.bus_prefix}
        argv = [sys.executable, "-m", "services.cli", "projector"]
        argv += ["--nats", self._settings.nats_url, "--db", self._settings.projector_db]
        with self._log_file.open("ab") as out:
            self._proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def kill(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGKILL)
        self._proc.wait(10)

    def stop(self) -> int | None:
        if self._proc is None or self._proc.poll() is not None:
            return self._proc.returncode if self._proc else None
        self._proc.send_signal(signal.SIGTERM)
        return self._proc.wait(10)


@pytest.fixture
def projector_process(
    settings: EventStoreSettings, tmp_path: Path
) -> Iterator[ProjectorProcess]:
    proc = ProjectorProcess(settings, tmp_path / "projector.log")
    yield proc
    proc.stop()


async def _position(settings: EventStoreSettings) -> int:
    """The projector's recorded position (0 before its file and schema exist)."""
    if not Path(settings.projector_db).exists():
        return 0
    stream = BusNames(settings.bus_prefix).log_stream
    try:
        db = await SqliteProjection.open(settings.projector_db, readonly=True)
        try:
            return await db.position(stream)
        finally:
            await db.close()
    except (ProjectionError, sqlite3.Error):
        return 0  # the process is still creating its schema


async def _wait_position(
    settings: EventStoreSettings, at_least: int, deadline_s: float = 20
) -> None:
    async def reached() -> bool:
        return await _position(settings) >= at_least

    # Polls another process's file: there is no event to wait on.
    await eventually(reached, deadline_s, what=f"projector position {at_least}")


async def test_a_killed_and_restarted_projector_copies_every_event_exactly_once(
    nc: Client, settings: EventStoreSettings, projector_process: ProjectorProcess
) -> None:
    log = await open_log(nc, settings)
    js = nc.jetstream()
    projector_process.start()
    sessions = [f"s_p{i}" for i in range(3)]
    written = {s: await append_script(log, s, 50) for s in sessions}
    await _wait_position(settings, 1)
    projector_process.kill()  # mid-stream: events keep coming while it is down
    for s in sessions:
        written[s] += await _more(log, s, 150)
    projector_process.start()
    last = (await js.stream_info(log.names.log_stream)).state.last_seq
    await _wait_position(settings, last)
    db = await SqliteProjection.open(settings.projector_db, readonly=True)
    try:
        for s in sessions:
            copied = await db.read(s)
            assert [e.seq for e in copied] == list(range(1, 201))
            assert [e.raw for e in copied] == [e.raw for e in written[s]]
            row = await db.session(s)
            assert row is not None
            assert (row.device_id, row.last_seq) == ("dev1", 200)
        async with db._db.execute("SELECT COUNT(*) FROM events") as cur:
            assert (await cur.fetchone()) == (600,)
    finally:
        await db.close()
    # The projector re-put the session index record of every session.created.
    index = await SessionIndex.open(js, log.names)
    assert {r.session_id for r in await index.list("dev1")} == set(sessions)
    assert projector_process.stop() == 0  # SIGTERM: drains and exits cleanly


async def _more(log: JetStreamLog, session: str, n: int) -> list:  # type: ignore[type-arg]
    return [
        await log.append(session, AgentMessage(turn_id="t", text=str(i)), actor="w")
        for i in range(n)
    ]


@asynccontextmanager
async def running(settings: EventStoreSettings) -> AsyncIterator[None]:
    """The projector's ``run`` in this process, stopped on exit."""
    stop = asyncio.Event()
    task = asyncio.create_task(run(settings, stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_malformed_log_messages_are_dead_lettered_and_copying_goes_on(
    nc: Client, settings: EventStoreSettings
) -> None:
    log = await open_log(nc, settings)
    names, js = log.names, nc.jetstream()
    good = await append_script(log, "s_ok", 3)
    real = good[0].raw
    await js.publish(names.log_subject("s_bad", 1, "user.prompt"), b"not json")
    await js.publish(names.log_subject("s_bad", 2, "user.prompt"), b'{"hello":1}')
    wrong_place = names.log_subject("s_elsewhere", 7, "session.created")
    await js.publish(wrong_place, real, headers={SEQ_HEADER: "7", TYPE_HEADER: "x"})
    announced: list[str] = []

    async def heard(msg: Msg) -> None:
        announced.append((msg.headers or {})["Agentbus-Subject"])

    sub = await nc.subscribe(dead_letter_subject(names), cb=heard)
    later = await append_script(log, "s_after", 2)
    last = (await js.stream_info(names.log_stream)).state.last_seq
    async with running(settings):
        await _wait_position(settings, last)
        deadline = time.monotonic() + 10
        while len(announced) < 3:
            assert time.monotonic() < deadline, announced
            await asyncio.sleep(0.02)  # core messages in flight
    await sub.unsubscribe()
    db = await SqliteProjection.open(settings.projector_db, readonly=True)
    try:
        dead = await db.dead_letters(names.log_stream)
        assert [d.subject for d in dead] == [
            names.log_subject("s_bad", 1, "user.prompt"),
            names.log_subject("s_bad", 2, "user.prompt"),
            wrong_place,
        ]
        assert "undecodable" in dead[0].reason
        assert "does not match" in dead[2].reason
        assert [e.raw for e in await db.read("s_ok")] == [e.raw for e in good]
        assert [e.raw for e in await db.read("s_after")] == [e.raw for e in later]
        assert await db.read("s_bad") == []
    finally:
        await db.close()
    assert announced == [d.subject for d in dead]


async def test_purged_ranges_come_from_the_projector_and_appends_go_on_after_them(
    nc: Client, settings: EventStoreSettings
) -> None:
    log = await open_log(nc, settings)
    js = nc.jetstream()
    written = await append_script(log, "s_old", 40)
    last = (await js.stream_info(log.names.log_stream)).state.last_seq
    async with running(settings):
        await _wait_position(settings, last)
        tight = settings_for(
            settings.nats_url,
            settings.bus_prefix,
            Path(settings.projector_db),
            log_max_msgs=10,
        )
        await ensure_log_stream(js, log.names, tight)
        reader = JetStreamLog(nc, log.names)
        assert [e.raw for e in await reader.read("s_old")] == [e.raw for e in written]
        # tail: old range from the projector, the rest from JetStream, then live
        got: list[int] = []

        async def follow() -> None:
            async for stored in reader.tail("s_old", 5):
                got.append(stored.seq)
                if stored.seq == 41:
                    return

        task = asyncio.create_task(follow())
        await log.append("s_old", UserPrompt(text="again", turn_id="t9"), actor="d")
        await asyncio.wait_for(task, 10)
        assert got == list(range(6, 42))
        # The copy holds event 41 before JetStream lets it go (with a 10-message
        # limit the fillers below can push it out faster than the copier runs).
        last = (await js.stream_info(log.names.log_stream)).state.last_seq
        await _wait_position(settings, last)
        # Push every s_old event out of JetStream: its head comes from SQLite.
        await append_script(log, "s_filler", 12)
        assert await reader.read("s_old", 41) == []
        whole: list[int] = []

        async def follow_all() -> None:
            async for stored in reader.tail("s_old"):
                whole.append(stored.seq)
                if stored.seq == 42:
                    return

        task = asyncio.create_task(follow_all())
        fresh = JetStreamLog(nc, log.names)
        appended = await fresh.append(
            "s_old", UserPrompt(text="x", turn_id="u"), actor="d"
        )
        assert appended.seq == 42
        await asyncio.wait_for(task, 10)
        assert whole == list(range(1, 43))
    # Neither JetStream nor a projector: a typed error, never a silent skip.
    with pytest.raises(RangeUnavailableError):
        await JetStreamLog(nc, log.names).read("s_old", 0)


async def test_a_bad_range_request_gets_an_error_reply_not_silence(
    nc: Client, settings: EventStoreSettings
) -> None:
    await open_log(nc, settings)
    async with running(settings):
        names = BusNames(settings.bus_prefix)
        deadline = time.monotonic() + 10
        while True:  # the subscription appears once run() has prepared
            with contextlib.suppress(Exception):
                reply = await nc.request(names.projector_read, b"{nope", timeout=1)
                break
            assert time.monotonic() < deadline
        assert b"bad request" in reply.data


async def test_the_projector_rides_out_a_nats_server_restart(tmp_path: Path) -> None:
    server = NatsServerProcess(tmp_path / "nats")
    await server.astart()
    nc = await nats.connect(
        server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.05
    )
    try:
        settings = settings_for(server.url, "ride", tmp_path / "projection.db")
        log = await open_log(nc, settings)
        written = await append_script(log, "s_ride", 30)
        async with running(settings):
            await _wait_position(settings, 30)
            server.kill()
            await server.astart()
            written += await _more(log, "s_ride", 30)  # retried until NATS is back
            await _wait_position(settings, 60)
        db = await SqliteProjection.open(settings.projector_db, readonly=True)
        try:
            assert [e.raw for e in await db.read("s_ride")] == [e.raw for e in written]
        finally:
            await db.close()
    finally:
        await nc.close()
        server.stop()


async def test_deliveries_lost_in_transit_are_fetched_again_not_skipped(
    nc: Client, settings: EventStoreSettings
) -> None:
    """A fetch whose messages never reach the copier (connection cut mid-fetch)
    must not let later events move the position past them."""
    log = await open_log(nc, settings)
    written = await append_script(log, "s_lost", 20)
    async with local_projector(nc, settings) as local:
        sub = local.projector._sub
        assert sub is not None
        lost = await sub.fetch(5, timeout=5)  # delivered, then dropped on the floor
        assert [m.metadata.sequence.stream for m in lost] == [1, 2, 3, 4, 5]
        await local.sync()
        copied = await local.projection.read("s_lost")
    assert [e.raw for e in copied] == [e.raw for e in written]
