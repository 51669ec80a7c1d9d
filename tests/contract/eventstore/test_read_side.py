"""One read-side contract, run against every backend that serves session logs.

eventsourcing-style: ``ReadSideContract`` holds the tests; each backend subclass
says how to build a reader over what the test appended (``create_reader``).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest
from nats.aio.client import Client

from eventstore.chain import digest
from eventstore.errors import RangeUnavailableError
from eventstore.log import JetStreamLog, StoredEvent
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess
from tests.support.eventstore import (
    append_script,
    local_projector,
    open_log,
    settings_for,
)


class Reader(Protocol):
    """What every backend of the read side offers."""

    async def read(
        self, session_id: str, after: int = 0, limit: int | None = None
    ) -> list[StoredEvent]: ...

    async def last_seq(self, session_id: str) -> int: ...


@dataclass
class Env:
    """What one test has: a connection, its settings, the writer, a resource stack."""

    nc: Client
    settings: EventStoreSettings
    log: JetStreamLog
    stack: AsyncExitStack


class ReadSideContract:
    """The behaviour every read side shares; subclasses supply ``create_reader``."""

    @pytest.fixture
    async def env(
        self, nc: Client, nats_server: NatsServerProcess, prefix: str, tmp_path: Path
    ) -> AsyncIterator[Env]:
        settings = settings_for(nats_server.url, prefix, tmp_path / "projection.db")
        log = await open_log(nc, settings)
        async with AsyncExitStack() as stack:
            yield Env(nc, settings, log, stack)

    async def create_reader(self, env: Env) -> Reader:
        """A reader over everything appended so far."""
        raise NotImplementedError

    async def test_an_unknown_session_reads_empty_with_last_seq_zero(
        self, env: Env
    ) -> None:
        await append_script(env.log, "s_other", 2)
        reader = await self.create_reader(env)
        assert await reader.read("s_unknown") == []
        assert await reader.last_seq("s_unknown") == 0

    async def test_reads_every_event_in_seq_order_byte_exact(self, env: Env) -> None:
        written = await append_script(env.log, "s_a", 7)
        reader = await self.create_reader(env)
        got = await reader.read("s_a")
        assert [e.seq for e in got] == list(range(1, 8))
        assert [e.raw for e in got] == [e.raw for e in written]
        assert [e.type for e in got] == [e.type for e in written]

    async def test_reads_only_what_follows_the_cursor(self, env: Env) -> None:
        await append_script(env.log, "s_a", 7)
        reader = await self.create_reader(env)
        assert [e.seq for e in await reader.read("s_a", 4)] == [5, 6, 7]

    async def test_limit_bounds_the_page(self, env: Env) -> None:
        await append_script(env.log, "s_a", 7)
        reader = await self.create_reader(env)
        assert [e.seq for e in await reader.read("s_a", 2, limit=3)] == [3, 4, 5]

    async def test_reading_at_the_head_returns_nothing(self, env: Env) -> None:
        await append_script(env.log, "s_a", 5)
        reader = await self.create_reader(env)
        assert await reader.read("s_a", 5) == []

    async def test_a_cursor_past_the_head_raises_range_unavailable(
        self, env: Env
    ) -> None:
        await append_script(env.log, "s_a", 5)
        reader = await self.create_reader(env)
        with pytest.raises(RangeUnavailableError) as info:
            await reader.read("s_a", 9)
        assert info.value.reason == "cursor_ahead"

    async def test_sessions_never_see_each_others_events(self, env: Env) -> None:
        a = await append_script(env.log, "s_a", 4)
        b = await append_script(env.log, "s_b", 6)
        reader = await self.create_reader(env)
        assert [e.raw for e in await reader.read("s_a")] == [e.raw for e in a]
        assert [e.raw for e in await reader.read("s_b")] == [e.raw for e in b]

    async def test_each_event_chains_to_the_digest_of_the_one_before(
        self, env: Env
    ) -> None:
        await append_script(env.log, "s_a", 6)
        reader = await self.create_reader(env)
        events = await reader.read("s_a")
        assert events[0].event().prev is None
        for before, after in itertools.pairwise(events):
            assert after.event().prev == digest(before.raw)

    async def test_envelopes_agree_with_the_stored_seq_and_type(self, env: Env) -> None:
        await append_script(env.log, "s_a", 6)
        reader = await self.create_reader(env)
        for stored in await reader.read("s_a"):
            event = stored.event()
            assert (event.session_id, event.seq, event.type) == (
                "s_a",
                stored.seq,
                stored.type,
            )

    async def test_last_seq_is_the_head(self, env: Env) -> None:
        await append_script(env.log, "s_a", 6)
        reader = await self.create_reader(env)
        assert await reader.last_seq("s_a") == 6


class TestJetStreamReadSide(ReadSideContract):
    """The live log, everything still in JetStream."""

    async def create_reader(self, env: Env) -> Reader:
        return JetStreamLog(env.nc, BusNames(env.settings.bus_prefix))


class TestSqliteProjectionReadSide(ReadSideContract):
    """The projector's SQLite copy, read directly (``audit --db``)."""

    async def create_reader(self, env: Env) -> Reader:
        local = await env.stack.enter_async_context(
            local_projector(env.nc, env.settings)
        )
        await local.sync()
        return local.projection


class TestPurgedJetStreamReadSide(ReadSideContract):
    """The live log after retention dropped all but 2 messages: old ranges come
    from the projector over request/reply, transparently."""

    async def create_reader(self, env: Env) -> Reader:
        local = await env.stack.enter_async_context(
            local_projector(env.nc, env.settings, serve=True)
        )
        await local.sync()
        tight = settings_for(
            env.settings.nats_url,
            env.settings.bus_prefix,
            Path(env.settings.projector_db),
            log_max_msgs=2,
        )
        names = BusNames(env.settings.bus_prefix)
        await ensure_log_stream(env.nc.jetstream(), names, tight)
        info = await env.nc.jetstream().stream_info(names.log_stream)
        assert info.state.messages <= 2
        return JetStreamLog(env.nc, names)
