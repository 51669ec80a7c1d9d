"""Cancel, idle release (T1) and resume on another worker, close."""

from __future__ import annotations

from schemas.events import SessionClosed, WorkerAssigned, WorkerReleased
from tests.integration.pool.harness import Harness
from tests.support.fake_openai import FakeOpenAI, answer

# 2,000 words at 20 ms: a 40 s window for the cancel to land. 500 words (10 s)
# streamed to the end before the cancel was seen on a box at load 8 (the test
# and the worker each starved of CPU); a cancel that lands ends the turn at once.
LONG = " ".join(f"w{i}" for i in range(2000))


async def test_cancel_stops_the_model_stream_and_keeps_the_partial_message(
    harness: Harness,
) -> None:
    await harness.pool(scripted_token_delay_s=0.02)
    sid = await harness.session()
    _, turn = await harness.script(sid, {"say": LONG})
    await harness.wait_for(sid, lambda e: e.type == "agent.message.delta")
    seq = await harness.cancel(sid, turn)
    ended = await harness.ended(sid, turn)
    assert ended.data.stop_reason == "cancelled"
    assert ended.seq > seq
    events = await harness.events(sid)
    partial = [e.data.text for e in events if e.type == "agent.message"]
    assert len(partial) == 1
    assert LONG.startswith(partial[0])
    assert len(partial[0]) < len(LONG)
    _, after = await harness.script(sid, {"say": "next"})
    assert (await harness.ended(sid, after)).data.stop_reason == "end_turn"


async def test_a_queued_turn_cancelled_before_it_starts_never_runs(
    harness: Harness,
) -> None:
    sid = await harness.session()
    _, first = await harness.script(sid, {"say": "skip me"})
    await harness.cancel(sid, first)
    _, second = await harness.script(sid, {"say": "run me"})
    await harness.pool()
    assert (await harness.ended(sid, first)).data.stop_reason == "cancelled"
    assert (await harness.ended(sid, second)).data.stop_reason == "end_turn"
    started = [
        e.data.turn_id for e in await harness.events(sid) if e.type == "turn.started"
    ]
    assert started == [second]


async def test_idle_worker_releases_after_t1_and_the_next_prompt_resumes_with_history(
    harness: Harness, fake_openai: FakeOpenAI
) -> None:
    await harness.pool(
        pool_workers=2,
        pool_idle_release_s=0.3,
        model="openai",
        model_base_url=fake_openai.url,
        model_api_key="sk-test",
    )
    fake_openai.push(answer("first answer"), answer("second answer"))
    sid = await harness.session()
    _, first = await harness.prompt(sid, "remember the word walnut")
    await harness.ended(sid, first)
    released = await harness.wait_for(sid, lambda e: e.type == "worker.released")
    assert released.data.reason == "idle"
    _, second = await harness.prompt(sid, "which word?")
    assert (await harness.ended(sid, second)).data.stop_reason == "end_turn"
    events = await harness.events(sid)
    assigned = [e.data for e in events if isinstance(e.data, WorkerAssigned)]
    assert len(assigned) == 2
    # The released worker queued up behind the other warm one: another worker.
    assert assigned[0].worker_id != assigned[1].worker_id
    seen = fake_openai.requests[1]["messages"]
    assert [m["role"] for m in seen] == ["system", "user", "assistant", "user"]
    assert seen[1]["content"] == "remember the word walnut"
    assert seen[2]["content"] == "first answer"
    assert seen[3]["content"] == "which word?"


async def test_closing_the_session_cancels_the_turn_and_releases_the_worker(
    harness: Harness,
) -> None:
    await harness.pool(scripted_token_delay_s=0.02)
    sid = await harness.session()
    _, turn = await harness.script(sid, {"say": LONG})
    await harness.wait_for(sid, lambda e: e.type == "agent.message.delta")
    await harness.append(sid, SessionClosed())
    assert (await harness.ended(sid, turn)).data.stop_reason == "cancelled"
    released = await harness.wait_for(sid, lambda e: isinstance(e.data, WorkerReleased))
    assert released.data.reason == "closed"


async def test_a_turn_waiting_for_a_person_parks_after_t1_and_its_answer_wakes_it(
    harness: Harness,
) -> None:
    await harness.pool(approval="ask-exec", pool_idle_release_s=0.3)
    sid = await harness.session()
    bash = {"tool": "bash", "args": {"command": "rm -rf /"}}
    _, turn = await harness.script(sid, bash, {"say": "understood"})
    request = await harness.wait_for(sid, lambda e: e.type == "permission.requested")
    released = await harness.wait_for(sid, lambda e: e.type == "worker.released")
    assert released.data.reason == "awaiting_permission"
    # Parked: the turn is still open (no turn.ended) and no worker holds it.
    assert not any(e.type == "turn.ended" for e in await harness.events(sid))
    seq = await harness.answer(sid, request.data.request_id, "reject_once")
    await harness.wait_for(sid, lambda e: e.type == "worker.assigned", seq)
    assert (await harness.ended(sid, turn)).data.stop_reason == "end_turn"
    events = await harness.events(sid)
    result = next(e.data for e in events if e.type == "tool.result")
    assert result.error == "the user rejected this tool call"
    assert [e.data.text for e in events if e.type == "agent.message"] == ["understood"]


async def test_cancelling_a_parked_turn_wakes_it_and_ends_it_cancelled(
    harness: Harness,
) -> None:
    await harness.pool(approval="ask-exec", pool_idle_release_s=0.3)
    sid = await harness.session()
    bash = {"tool": "bash", "args": {"command": "true"}}
    _, turn = await harness.script(sid, bash, {"say": "never said"})
    await harness.wait_for(sid, lambda e: e.type == "permission.requested")
    released = await harness.wait_for(sid, lambda e: e.type == "worker.released")
    assert released.data.reason == "awaiting_permission"
    # Nobody answers: the cancel alone must wake the parked turn and end it.
    await harness.cancel(sid, turn)
    assert (await harness.ended(sid, turn)).data.stop_reason == "cancelled"
    events = await harness.events(sid)
    assert [e.data.text for e in events if e.type == "agent.message"] == []


async def test_sessions_waiting_for_people_yield_their_workers_to_new_prompts(
    harness: Harness,
) -> None:
    await harness.pool(approval="ask-exec", pool_workers=1)
    waiting = await harness.session()
    await harness.script(waiting, {"tool": "bash", "args": {"command": "true"}})
    await harness.wait_for(waiting, lambda e: e.type == "permission.requested")
    other = await harness.session()
    _, turn = await harness.script(other, {"say": "served meanwhile"})
    assert (await harness.ended(other, turn)).data.stop_reason == "end_turn"
    released = await harness.wait_for(waiting, lambda e: e.type == "worker.released")
    assert released.data.reason == "awaiting_permission"


async def test_a_busy_session_gives_its_only_worker_way_to_a_waiting_one(
    harness: Harness,
) -> None:
    # One worker; session A has a queue of slow turns, B one prompt. A keeps the
    # worker for its fair share, then yields after a turn: B is served before A's
    # queue drains (before, B waited for all of A's work).
    await harness.pool(pool_workers=1, scripted_token_delay_s=0.05)
    busy = await harness.session()
    words = " ".join(f"w{i}" for i in range(20))  # ~1 s of streaming per turn
    turns = [(await harness.script(busy, {"say": words}))[1] for _ in range(6)]
    await harness.wait_for(busy, lambda e: e.type == "turn.started")
    waiting = await harness.session()
    _, turn = await harness.script(waiting, {"say": "served meanwhile"})
    served = await harness.ended(waiting, turn, timeout=60)
    last = await harness.ended(busy, turns[-1], timeout=90)
    started = [e for e in await harness.events(busy) if e.type == "turn.started"]
    assert served.ts < started[-1].ts, "the waiting session ran before A's last turn"
    assert last.data.stop_reason == "end_turn"
    released = [e for e in await harness.events(busy) if e.type == "worker.released"]
    assert any(e.data.reason == "gave_way" for e in released)


async def test_a_busy_session_keeps_its_worker_when_only_its_own_prompts_wait(
    harness: Harness,
) -> None:
    # Its queued prompts' wake-ups wait in the stream (its worker serves them from
    # the log); they are no other session waiting, so no fair-share yield (each
    # yield held the session's next turn back 2 s).
    await harness.pool(pool_workers=1, scripted_token_delay_s=0.05)
    busy = await harness.session()
    words = " ".join(f"w{i}" for i in range(20))  # ~1 s of streaming per turn
    turns = [(await harness.script(busy, {"say": words}))[1] for _ in range(5)]
    for turn in turns:
        assert (await harness.ended(busy, turn, timeout=60)).data.stop_reason == (
            "end_turn"
        )
    released = [e for e in await harness.events(busy) if e.type == "worker.released"]
    assert [e.data.reason for e in released] == []
