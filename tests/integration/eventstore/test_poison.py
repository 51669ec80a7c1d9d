"""Poison messages in a session's log: readers skip them as dead letters.

Raw messages are published into a real stream on the session's subjects, as
any login allowed to publish there could: without our headers, on a subject no
event has, with a forged header over a body that is not an event, or a stale
copy on an event's subject. Reads, folds, appends and the audit go on.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable

import msgspec
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from eventstore.deadletter import DEAD_LETTERS
from eventstore.fold import SessionSummary, evolve_stored
from eventstore.index import SessionIndex, SessionRecord
from eventstore.log import JetStreamLog
from eventstore.reader import SEQ_HEADER, TYPE_HEADER
from eventstore.settings import EventStoreSettings
from schemas.events import AgentMessage
from schemas.names import BusNames
from services.audit_cli import parser, run_audit
from tests.support.eventstore import append_script, open_log

Poison = Callable[[JetStreamContext, BusNames, str], Awaitable[int | None]]
# What a poison leaves: the seq whose place it takes (None: none), and whether
# the reader passes it on (its head looks like ours; the fold then skips it).
Case = tuple[JetStreamLog, str, int | None, bool]


async def _next_seq_no_headers(js: JetStreamContext, n: BusNames, sid: str) -> int:
    """On the next event's subject, without headers: it takes seq 5's place."""
    await js.publish(n.log_subject(sid, 5, "user.prompt"), b'{"text": "hi"}')
    return 5


async def _junk_subject(js: JetStreamContext, n: BusNames, sid: str) -> None:
    await js.publish(f"{n.prefix}.log.{sid}.junk", b"\xff\x00 not json")


async def _forged_headers(js: JetStreamContext, n: BusNames, sid: str) -> int:
    """Our headers and envelope head, a payload that is not an agent.message."""
    body = msgspec.json.encode(
        {"session_id": sid, "seq": 5, "type": "agent.message", "data": {"x": 1}}
    )
    headers = {SEQ_HEADER: "5", TYPE_HEADER: "agent.message"}
    await js.publish(n.log_subject(sid, 5, "agent.message"), body, headers=headers)
    return 5


async def _stale_copy(js: JetStreamContext, n: BusNames, sid: str) -> None:
    """A second message on event 2's subject, after it (no headers)."""
    await js.publish(n.log_subject(sid, 2, "user.prompt"), b"{}")


POISONS: dict[str, Poison] = {
    "next_seq_no_headers": _next_seq_no_headers,
    "junk_subject": _junk_subject,
    "forged_headers": _forged_headers,
    "stale_copy": _stale_copy,
}


@pytest.fixture(params=sorted(POISONS))
async def poisoned(
    request: pytest.FixtureRequest, nc: Client, settings: EventStoreSettings
) -> Case:
    """A 4-event session, then one poison message as its latest message."""
    log = await open_log(nc, settings)
    await append_script(log, "s_p", 4)
    hole = await POISONS[request.param](nc.jetstream(), log.names, "s_p")
    passed_on = request.param == "forged_headers"
    return JetStreamLog(nc, log.names), "s_p", hole, passed_on


async def test_reads_skip_the_poison_and_count_it(poisoned: Case) -> None:
    log, sid, _, passed_on = poisoned
    before = DEAD_LETTERS.count
    events = await log.read(sid)
    assert [e.seq for e in events] == [1, 2, 3, 4] + ([5] if passed_on else [])
    assert await log.read(sid, 2, 1) == [events[2]]
    summary = SessionSummary()
    for stored in events:
        summary = evolve_stored(summary, stored)
    assert summary.device_id == "dev1"
    assert summary.last_seq == len(events)
    assert summary.open_turns == ("t",)  # the poison changed nothing
    assert DEAD_LETTERS.count > before


async def test_appends_go_on_after_the_poison_and_tails_see_them(
    poisoned: Case,
) -> None:
    log, sid, hole, passed_on = poisoned
    assert (await log.head(sid)).seq == (hole or 4)
    stored = await log.append(sid, AgentMessage(turn_id="t", text="on"), actor="w")
    assert stored.seq == (hole or 4) + 1
    tail = log.tail(sid, 3)
    seqs: list[int] = []
    while not seqs or seqs[-1] < stored.seq:
        seqs.append((await asyncio.wait_for(anext(tail), 5.0)).seq)
    await tail.aclose()  # type: ignore[attr-defined]
    assert seqs == [4, *([5] if passed_on else []), stored.seq]


async def test_audit_names_the_dead_letter_and_exits_1(
    poisoned: Case,
    settings: EventStoreSettings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, sid, _, _ = poisoned
    args: argparse.Namespace = parser().parse_args([sid])
    assert await run_audit(args, settings) == 1
    err = capsys.readouterr().err
    assert "break at seq" in err
    assert "stream seq" in err or "does not decode" in err or "undecodable" in err


async def test_an_undecodable_index_record_is_skipped_not_raised(
    nc: Client, settings: EventStoreSettings
) -> None:
    names = BusNames(settings.bus_prefix)
    index = await SessionIndex.open(nc.jetstream(), names)
    await index.add(SessionRecord(session_id="s_ok", device_id="d1"))
    kv = await nc.jetstream().key_value(names.sessions_bucket)
    await kv.put("dev.d1.s_bad", b"\xff not a record")
    await kv.put("sid.s_bad", b"{}")
    assert [r.session_id for r in await index.list("d1")] == ["s_ok"]
    assert await index.get("s_bad") is None
    assert await index.get("s_ok") == SessionRecord(session_id="s_ok", device_id="d1")
