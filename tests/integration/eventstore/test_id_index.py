"""The id→seq index: a caller-given event id retried after JetStream's dedupe
window, with other events stored after its first landing, is never stored twice."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from eventstore.audit import verify
from eventstore.idindex import IdIndex, index_key, parse_mark
from eventstore.log import JetStreamLog
from eventstore.settings import EventStoreSettings
from schemas.events import AgentMessage, UserPrompt
from schemas.names import BusNames
from tests.support.eventstore import append_script, dedupe_window_elapsed, open_log


def short_window(settings: EventStoreSettings, prefix: str) -> EventStoreSettings:
    return EventStoreSettings(
        nats_url=settings.nats_url, bus_prefix=prefix, log_duplicate_window_s=1.0
    )


class LostRecords(IdIndex):
    """An index whose "stored at seq" records never arrive: the writer died
    between its publish and that write."""

    async def stored(self, session_id: str, event_id: str, seq: int) -> None:
        return None


async def stream_msgs(nc: Client, names: BusNames) -> int:
    return (await nc.jetstream().stream_info(names.log_stream)).state.messages


async def landed_then_buried(
    nc: Client, log: JetStreamLog, session: str, event_id: str
) -> bytes:
    """3 events, ``event_id`` at seq 4, two more events by another writer after it;
    then wait out the dedupe window. Returns the stored bytes of seq 4."""
    await append_script(log, session, 3)
    prompt = UserPrompt(text="hi", turn_id="t1")
    original = await log.append(session, prompt, actor="d", event_id=event_id)
    assert original.seq == 4
    other = JetStreamLog(nc, log.names)
    for text in ("a", "b"):
        await other.append(session, AgentMessage(turn_id="t1", text=text), actor="w")
    await dedupe_window_elapsed(nc, log.names, 1.0)
    return original.raw


async def assert_once(log: JetStreamLog, session: str, event_id: str) -> None:
    stored = await log.read(session)
    assert [e.seq for e in stored] == [1, 2, 3, 4, 5, 6]
    assert [e.event().id for e in stored].count(event_id) == 1
    assert verify(session, stored).first_break is None


async def test_a_retry_after_the_window_returns_the_original_and_stores_nothing(
    nc: Client, settings: EventStoreSettings
) -> None:
    log = await open_log(nc, short_window(settings, "idx1"))
    original = await landed_then_buried(nc, log, "s_late", "ev_late")
    before = await stream_msgs(nc, log.names)
    fresh = JetStreamLog(nc, log.names)  # another gateway: its head is seq 6
    again = await fresh.append(
        "s_late", UserPrompt(text="hi", turn_id="t1"), actor="d", event_id="ev_late"
    )
    assert (again.seq, again.raw) == (4, original)
    assert await stream_msgs(nc, log.names) == before
    await assert_once(log, "s_late", "ev_late")


async def test_a_writer_that_died_before_recording_the_seq_is_found_in_the_log(
    nc: Client, settings: EventStoreSettings
) -> None:
    log = await open_log(nc, short_window(settings, "idx2"))
    log._ids = LostRecords(nc, log.names)
    original = await landed_then_buried(nc, log, "s_died", "ev_died")
    kv = await nc.jetstream().key_value(log.names.event_ids_bucket)
    claim = await kv.get(index_key("s_died", "ev_died"))
    assert parse_mark(claim.value or b"") == (None, 3)  # claimed, never recorded
    before = await stream_msgs(nc, log.names)
    again = await JetStreamLog(nc, log.names).append(
        "s_died", UserPrompt(text="hi", turn_id="t1"), actor="d", event_id="ev_died"
    )
    assert (again.seq, again.raw) == (4, original)
    assert await stream_msgs(nc, log.names) == before
    await assert_once(log, "s_died", "ev_died")
    # The retry recorded where the id landed (a plain publish: read it back).
    async for entry in await kv.watch(index_key("s_died", "ev_died")):
        if entry is not None and entry.value == b"s4":
            break


async def test_a_claimed_id_that_never_landed_is_appended_once(
    nc: Client, settings: EventStoreSettings
) -> None:
    log = await open_log(nc, short_window(settings, "idx3"))
    await append_script(log, "s_never", 3)
    # A writer claimed the id and died before publishing.
    assert await IdIndex(nc, log.names).claim("s_never", "ev_never", 3) is None
    await log.append("s_never", AgentMessage(turn_id="t", text="x"), actor="w")
    prompt = UserPrompt(text="hi", turn_id="t1")
    first = await JetStreamLog(nc, log.names).append(
        "s_never", prompt, actor="d", event_id="ev_never"
    )
    again = await JetStreamLog(nc, log.names).append(
        "s_never", prompt, actor="d", event_id="ev_never"
    )
    assert first.seq == again.seq == 5
    assert first.raw == again.raw
    stored = await log.read("s_never")
    assert [e.event().id for e in stored].count("ev_never") == 1


async def test_appends_without_a_caller_id_never_touch_the_index(
    nc: Client, settings: EventStoreSettings
) -> None:
    log = await open_log(nc, short_window(settings, "idx4"))
    await append_script(log, "s_plain", 5)
    with pytest.raises(NotFoundError):
        await nc.jetstream().stream_info(f"KV_{log.names.event_ids_bucket}")


def test_keys_are_plain_tokens_or_a_hash_and_marks_parse() -> None:
    assert index_key("s_1", "ev_2") == "s_1.ev_2"
    odd = index_key("s_1", "ev 2.x*")
    assert odd.startswith("h.")
    assert odd == index_key("s_1", "ev 2.x*")
    assert odd != index_key("s_1", "ev 2.x?")
    assert parse_mark(b"s12") == (12, 11)
    assert parse_mark(b"p7") == (None, 7)
    assert parse_mark(b"garbage") == (None, 0)
