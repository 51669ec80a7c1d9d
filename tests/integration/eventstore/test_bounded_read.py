"""``read(after, limit)`` returns what the full read would, and fetches no more.

"No more" is counted in messages the client received, not in time: the old
ordered-consumer path received every event after the cursor.
"""

from __future__ import annotations

import pytest
from nats.aio.client import Client

from eventstore.log import JetStreamLog
from eventstore.settings import EventStoreSettings
from tests.support.eventstore import append_script, open_log


@pytest.fixture
async def log(nc: Client, settings: EventStoreSettings) -> JetStreamLog:
    log = await open_log(nc, settings)
    await append_script(log, "s_b", 300)
    return log


@pytest.mark.parametrize(
    ("after", "limit"),
    # batched direct get up to BATCH_MAX (16); the consumer path above it
    [(0, 1), (10, 16), (290, 16), (295, 16), (299, 1), (300, 5), (0, 300), (10, 25)],
)
async def test_a_bounded_read_is_the_slice_of_the_full_read(
    log: JetStreamLog, after: int, limit: int
) -> None:
    everything = await log.read("s_b")
    assert [e.seq for e in everything] == list(range(1, 301))
    assert await log.read("s_b", after, limit) == everything[after : after + limit]


async def test_a_bounded_read_receives_about_limit_messages(
    nc: Client, log: JetStreamLog
) -> None:
    before = nc.stats["in_msgs"]
    got = await log.read("s_b", 100, 3)
    received = nc.stats["in_msgs"] - before
    assert [e.seq for e in got] == [101, 102, 103]
    assert received <= 3 + 3  # the locate, the batch, its end marker
    before = nc.stats["in_msgs"]
    await log.read("s_b", 100)  # unbounded: the consumer sends all 200
    assert nc.stats["in_msgs"] - before >= 200


async def test_a_bounded_read_steps_over_dead_letters(
    nc: Client, log: JetStreamLog
) -> None:
    js, names = nc.jetstream(), log.names
    await js.publish(names.log_subject("s_b", 301, "user.prompt"), b"no headers")
    await js.publish(f"{names.prefix}.log.s_b.junk", b"junk")
    await append_script(log, "s_b", 2)  # seqs 302, 303 (301 is taken)
    everything = await log.read("s_b")
    assert [e.seq for e in everything][-3:] == [300, 302, 303]
    assert [e.seq for e in await log.read("s_b", 299, 4)] == [300, 302, 303]
