"""Resume from a snapshot plus the log after it; a stale snapshot is ignored."""

from __future__ import annotations

import msgspec
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from services.pool.snapshot import Snapshot, ensure_snapshots
from tests.integration.pool.harness import Harness
from tests.support.fake_openai import FakeOpenAI, answer


async def released(h: Harness, sid: str, after: int) -> int:
    event = await h.wait_for(sid, lambda e: e.type == "worker.released", after)
    return event.seq


async def test_resume_folds_the_snapshot_and_ignores_one_the_log_contradicts(
    harness: Harness, fake_openai: FakeOpenAI
) -> None:
    await harness.pool(
        pool_idle_release_s=0.2,
        pool_snapshot_every=3,
        model="openai",
        model_base_url=fake_openai.url,
    )
    fake_openai.push(answer("one"), answer("two"), answer("three"))
    kv = await ensure_snapshots(harness.nc.jetstream(), harness.names)
    sid = await harness.session()
    _, first = await harness.prompt(sid, "first prompt")
    await harness.ended(sid, first)
    seq = await released(harness, sid, 0)
    await harness.until_async(lambda: saved_past(kv, sid, seq))
    snapshot = await load(kv, sid)
    assert snapshot.messages[0] == {"role": "user", "content": "first prompt"}
    # A snapshot that matches the log is used as is (so an edit to it shows).
    edited = msgspec.structs.replace(
        snapshot,
        messages=[
            {"role": "user", "content": "from the snapshot"},
            *snapshot.messages[1:],
        ],
    )
    await kv.put(sid, msgspec.json.encode(edited))
    _, second = await harness.prompt(sid, "second prompt")
    await harness.ended(sid, second)
    assert fake_openai.requests[1]["messages"][1]["content"] == "from the snapshot"
    seq = await released(harness, sid, seq)
    await harness.until_async(lambda: saved_past(kv, sid, seq))
    # One whose last event id the log contradicts is ignored: a full fold.
    stale = msgspec.structs.replace(edited, last_id="ev_not_in_the_log")
    await kv.put(sid, msgspec.json.encode(stale))
    _, third = await harness.prompt(sid, "third prompt")
    await harness.ended(sid, third)
    seen = [m["content"] for m in fake_openai.requests[2]["messages"]]
    assert seen[1:] == ["first prompt", "one", "second prompt", "two", "third prompt"]


async def load(kv: KeyValue, sid: str) -> Snapshot:
    return msgspec.json.decode((await kv.get(sid)).value or b"", type=Snapshot)


async def saved_past(kv: KeyValue, sid: str, seq: int) -> bool:
    """The worker saved a snapshot that covers ``seq`` (it does after releasing)."""
    try:
        return (await load(kv, sid)).last_seq >= seq
    except KeyNotFoundError:
        return False
