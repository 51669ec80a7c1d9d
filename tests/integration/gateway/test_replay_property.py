"""Property: random cursors and disconnects while events are appended concurrently.

On each connection every seq appears once, in order, starting at cursor+1; across
connections the client sees every event.
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.log import JetStreamLog
from schemas.events import ToolUpdate

from .conftest import auth, create_session
from .sse_client import read_event

TOTAL = 60  # appended per example, on top of session.created

connection = st.tuples(
    st.integers(0, 8),  # rewind: resume this many events before the last seen
    st.integers(0, 15),  # events to read before hanging up
    st.booleans(),  # cursor in Last-Event-ID (else ?after=)
)


async def _append(bus: JetStreamLog, sid: str) -> None:
    for i in range(TOTAL):
        await bus.append(
            sid, ToolUpdate(call_id=f"c{i}", text=str(i)), actor="worker:w"
        )
        if i % 4 == 0:
            await asyncio.sleep(0.002)  # pace the writer so reads interleave with it


async def _connect(
    http, gw, sid, cursor: int, use_header: bool, want: int
) -> list[int]:
    """Open a stream at ``cursor``, read ``want`` events, hang up; their seqs."""
    headers = auth("prop")
    query = ""
    if use_header:
        headers["Last-Event-ID"] = str(cursor)
    else:
        query = f"?after={cursor}"
    got: list[int] = []
    async with http.get(
        f"{gw.base}/v1/sessions/{sid}/events{query}", headers=headers
    ) as r:
        assert r.status == 200
        async with asyncio.timeout(20):
            while len(got) < want:
                ev = await read_event(r)
                assert ev is not None
                if ev.comment:
                    continue
                assert ev.event != "resync"
                got.append(int(ev.id))
    return got


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(plan=st.lists(connection, min_size=1, max_size=6))
async def test_random_cursors_and_disconnects_see_every_event_once_in_order(
    gateway, http, bus, plan
):
    sid = await create_session(http, gateway, "prop")
    head = TOTAL + 1
    appender = asyncio.create_task(_append(bus, sid))
    seen: set[int] = set()
    last = 0
    try:
        for rewind, want, use_header in [*plan, (0, head, True)]:
            cursor = max(0, last - rewind)
            want = min(want, head - cursor)
            got = await _connect(http, gateway, sid, cursor, use_header, want)
            assert got == list(range(cursor + 1, cursor + 1 + want))
            seen.update(got)
            last = max(last, cursor + want)
    finally:
        await appender
    assert seen == set(range(1, head + 1))


LIVE_TOTAL = 150  # appended while clients join

client_plan = st.tuples(
    st.integers(1, LIVE_TOTAL),  # joins once the log reaches this seq
    st.lists(connection, min_size=1, max_size=4),
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(plans=st.lists(client_plan, min_size=2, max_size=12))
async def test_concurrent_clients_with_random_cursors_and_disconnects(
    gateway, http, bus, plans
):
    """Several clients join a live session at random points (the shared feed is
    often behind or ahead of a joining client), hang up and resume at random."""
    sid = await create_session(http, gateway, "prop")
    head = LIVE_TOTAL + 1
    progress = {"seq": 1}

    async def writer() -> None:
        for i in range(LIVE_TOTAL):
            stored = await bus.append(
                sid, ToolUpdate(call_id=f"c{i}"), actor="worker:w"
            )
            progress["seq"] = stored.seq
            if i % 2 == 0:
                await asyncio.sleep(0.002)  # pace so joins land mid-stream

    async def client(join_at: int, conns: list[tuple[int, int, bool]]) -> None:
        async with asyncio.timeout(30):
            while progress["seq"] < min(join_at, head):
                await asyncio.sleep(0.001)
        start = last = progress["seq"]  # the client has seen up to here
        seen: set[int] = set()
        for rewind, want, use_header in [*conns, (0, head, True)]:
            cursor = max(0, last - rewind)
            want = min(want, head - cursor)
            got = await _connect(http, gateway, sid, cursor, use_header, want)
            assert got == list(range(cursor + 1, cursor + 1 + want))
            seen.update(got)
            last = max(last, cursor + want)
        assert set(range(start + 1, head + 1)) <= seen

    await asyncio.gather(writer(), *(client(at, conns) for at, conns in plans))
