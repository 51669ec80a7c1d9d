"""Turns driven by the OpenAI-compatible client against the fake server."""

from __future__ import annotations

import json

from schemas.events import (
    AgentMessage,
    AgentMessageDelta,
    AgentMessageDiscarded,
    ErrorRaised,
    ToolResult,
)
from services.pool.conversation import Conversation
from tests.integration.pool.harness import Harness
from tests.support.fake_anthropic import FakeAnthropic, text_reply
from tests.support.fake_openai import (
    FakeOpenAI,
    Status,
    Stream,
    answer,
    chunk,
    text_chunks,
    tool_chunks,
    usage_chunk,
)


async def openai_pool(harness: Harness, fake: FakeOpenAI) -> None:
    await harness.pool(
        model="openai",
        model_base_url=fake.url,
        model_api_key="sk-test",
        model_name="fake-model",
        model_retry_base_s=0.01,
    )


async def test_many_streamed_tokens_become_few_deltas_and_one_full_message(
    harness: Harness, fake_openai: FakeOpenAI
) -> None:
    text = "".join(f"token{i} " for i in range(300))
    chunks = text_chunks(text, pieces=300)
    fake_openai.push(Stream([*chunks, chunk({}, "stop"), usage_chunk(40, 300)]))
    await openai_pool(harness, fake_openai)
    sid = await harness.session()
    _, turn = await harness.prompt(sid, "talk")
    ended = await harness.ended(sid, turn)
    assert ended.data.usage.input_tokens == 40
    assert ended.data.usage.output_tokens == 300
    assert ended.data.usage.model_s > 0  # the turn waited on the model stream
    events = await harness.events(sid)
    deltas = [e.data.text for e in events if isinstance(e.data, AgentMessageDelta)]
    assert "".join(deltas) == text
    assert len(deltas) < 30
    message = next(e.data for e in events if e.type == "agent.message")
    assert message.text == text
    assert fake_openai.requests[0]["model"] == "fake-model"
    assert {t["function"]["name"] for t in fake_openai.requests[0]["tools"]} == {
        "read", "write", "edit", "ls", "glob", "grep", "bash", "terminal", "code",
        "lsp",
    }  # fmt: skip


async def test_a_rejected_request_is_an_error_event_and_ends_the_turn(
    harness: Harness, fake_openai: FakeOpenAI
) -> None:
    fake_openai.push(Status(401, {"error": {"message": "Incorrect API key provided"}}))
    await openai_pool(harness, fake_openai)
    sid = await harness.session()
    _, turn = await harness.prompt(sid, "hello")
    ended = await harness.ended(sid, turn)
    assert ended.data.stop_reason == "error"
    error = next(
        e.data for e in await harness.events(sid) if isinstance(e.data, ErrorRaised)
    )
    assert error.code == "model_rejected"
    assert "Incorrect API key provided" in error.message
    assert error.turn_id == turn


async def test_bad_tool_arguments_are_answered_to_the_model_which_goes_on(
    harness: Harness, fake_openai: FakeOpenAI
) -> None:
    bad = tool_chunks(0, "call_bad", "read", "{not json")
    unknown = tool_chunks(1, "call_unknown", "rm_rf", json.dumps({"path": "/"}))
    missing = tool_chunks(2, "call_missing", "write", json.dumps({"path": "x"}))
    fake_openai.push(
        Stream([*bad, *unknown, *missing, chunk({}, "tool_calls")]), answer("sorry")
    )
    await openai_pool(harness, fake_openai)
    sid = await harness.session()
    _, turn = await harness.prompt(sid, "do things")
    assert (await harness.ended(sid, turn)).data.stop_reason == "end_turn"
    results = [
        e.data for e in await harness.events(sid) if isinstance(e.data, ToolResult)
    ]
    assert [r.ok for r in results] == [False, False, False]
    assert "not a JSON object" in (results[0].error or "")
    assert "no such tool" in (results[1].error or "")
    assert "content" in (results[2].error or "")
    seen = fake_openai.requests[1]["messages"]
    assert [m["role"] for m in seen[-4:]] == ["assistant", "tool", "tool", "tool"]
    assert [c["id"] for c in seen[-4]["tool_calls"]] == [
        "call_bad", "call_unknown", "call_missing",
    ]  # fmt: skip


async def test_a_stream_truncated_after_two_deltas_is_withdrawn_and_answered_once(
    harness: Harness, fake_openai: FakeOpenAI
) -> None:
    full = "The whole answer, said once."
    cut = Stream(text_chunks("The whole ans", pieces=2), done=False, clean=True)
    fake_openai.push(cut, answer(full, usage=(20, 6)), answer("second"))
    await openai_pool(harness, fake_openai)
    sid = await harness.session()
    _, turn = await harness.prompt(sid, "say it")
    ended = await harness.ended(sid, turn)
    assert ended.data.stop_reason == "end_turn"
    assert ended.data.model == "fake-model"
    usage = ended.data.usage
    assert (usage.retries, usage.retry_causes) == (1, {"truncated": 1})
    assert usage.retry_s > 0
    assert (usage.input_tokens, usage.output_tokens) == (20, 6)
    events = await harness.events(sid)
    kinds = [e.type for e in events if e.type.startswith("agent.message")]
    withdrawn = kinds.index("agent.message.discarded")
    assert "agent.message.delta" in kinds[:withdrawn]
    at = next(
        i for i, e in enumerate(events) if isinstance(e.data, AgentMessageDiscarded)
    )
    discarded = events[at].data
    assert (discarded.turn_id, discarded.attempt, discarded.cause) == (
        turn, 1, "truncated",
    )  # fmt: skip
    after = [e.data.text for e in events[at:] if isinstance(e.data, AgentMessageDelta)]
    assert "".join(after) == full
    messages = [e.data.text for e in events if isinstance(e.data, AgentMessage)]
    assert messages == [full]
    fold = Conversation()
    for event in events:
        fold.apply(event)
    assistant = [m["content"] for m in fold.messages if m["role"] == "assistant"]
    assert assistant == [full]

    _, second = await harness.prompt(sid, "again")
    await harness.ended(sid, second)
    history = fake_openai.requests[-1]["messages"]
    contents = [str(m.get("content")) for m in history]
    assert contents.count(full) == 1
    assert not any("The whole ans" in c and c != full for c in contents)


async def test_a_turn_goes_on_on_the_fallback_and_turn_ended_names_it(
    harness: Harness, fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    fake_openai.default = Status(503, {"error": {"message": "busy"}})
    fake_anthropic.push(text_reply("from the fallback"))
    await harness.pool(
        model="openai",
        model_base_url=fake_openai.url,
        model_name="fake-model",
        model_retry_base_s=0.01,
        model_fallbacks=f"anthropic:claude-fake@{fake_anthropic.url}",
        model_fallback_after=2,
    )
    sid = await harness.session()
    _, turn = await harness.prompt(sid, "hello")
    ended = await harness.ended(sid, turn)
    assert ended.data.stop_reason == "end_turn"
    assert ended.data.model == "claude-fake"
    assert ended.data.usage.retry_causes == {"http_503": 1, "fallback": 1}
    assert len(fake_openai.requests) == 2
    messages = [
        e.data.text for e in await harness.events(sid) if e.type == "agent.message"
    ]
    assert messages == ["from the fallback"]


async def test_a_response_that_keeps_breaking_leaves_no_half_answer(
    harness: Harness, fake_openai: FakeOpenAI
) -> None:
    fake_openai.default = Stream(text_chunks("never whole"), done=False, clean=True)
    await harness.pool(
        model="openai",
        model_base_url=fake_openai.url,
        model_retry_base_s=0.01,
        model_max_retries=1,
    )
    sid = await harness.session()
    _, turn = await harness.prompt(sid, "try")
    ended = await harness.ended(sid, turn)
    assert ended.data.stop_reason == "error"
    events = await harness.events(sid)
    discarded = [e.data for e in events if isinstance(e.data, AgentMessageDiscarded)]
    assert [(d.attempt, d.cause) for d in discarded] == [
        (1, "truncated"),
        (2, "model_unavailable"),
    ]
    assert not [e for e in events if isinstance(e.data, AgentMessage)]
    error = next(e.data for e in events if isinstance(e.data, ErrorRaised))
    assert error.code == "model_unavailable"
    assert events.index(next(e for e in events if e.data is discarded[-1])) < (
        events.index(next(e for e in events if e.data is error))
    )
    fold = Conversation()
    for event in events:
        fold.apply(event)
    assert [m["role"] for m in fold.messages] == ["user"]
