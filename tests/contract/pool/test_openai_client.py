"""OpenAIChatModel against a fake server streaming real chunk formats."""

from __future__ import annotations

import json

import pytest

from services.pool.errors import ModelError
from services.pool.models.base import (
    Finish,
    ModelChunk,
    Retrying,
    TextDelta,
    ThoughtDelta,
    ToolRequest,
)
from services.pool.models.openai import OpenAIChatModel
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

MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {}}}]


def model(server: FakeOpenAI, **over: object) -> OpenAIChatModel:
    kwargs: dict[str, object] = {"max_retries": 2, "retry_base_s": 0.01}
    kwargs.update(over)
    return OpenAIChatModel(server.url, "sk-test-secret", "fake-model", **kwargs)  # type: ignore[arg-type]


async def collect(client: OpenAIChatModel) -> list[ModelChunk]:
    try:
        return [c async for c in client.stream(MESSAGES, TOOLS)]
    finally:
        await client.close()


async def test_content_deltas_and_usage_stream_through(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(answer("Hello, streaming world!", usage=(12, 7)))
    chunks = await collect(model(fake_openai))
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert text == "Hello, streaming world!"
    assert sum(isinstance(c, TextDelta) for c in chunks) == 4
    assert chunks[-1] == Finish("stop", 12, 7, model="fake-model")
    body = fake_openai.requests[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == MESSAGES
    assert body["tools"] == TOOLS
    assert fake_openai.headers[0]["Authorization"] == "Bearer sk-test-secret"


async def test_reasoning_content_becomes_thought_deltas(
    fake_openai: FakeOpenAI,
) -> None:
    chunks = text_chunks("let me think", key="reasoning_content") + text_chunks("ok")
    fake_openai.push(Stream([*chunks, chunk({}, "stop")]))
    out = await collect(model(fake_openai))
    assert "".join(c.text for c in out if isinstance(c, ThoughtDelta)) == "let me think"
    assert "".join(c.text for c in out if isinstance(c, TextDelta)) == "ok"


async def test_tool_call_argument_fragments_are_joined_per_index(
    fake_openai: FakeOpenAI,
) -> None:
    one = json.dumps({"path": "calc/ops.py"})
    two = json.dumps({"command": "ls -la", "timeout_s": 5})
    a, b = tool_chunks(0, "call_a", "read", one), tool_chunks(1, "call_b", "bash", two)
    interleaved = [x for pair in zip(a, b, strict=True) for x in pair]
    fake_openai.push(Stream([*interleaved, chunk({}, "tool_calls"), usage_chunk(3, 4)]))
    out = await collect(model(fake_openai))
    calls = [c for c in out if isinstance(c, ToolRequest)]
    assert calls == [
        ToolRequest("call_a", "read", one),
        ToolRequest("call_b", "bash", two),
    ]
    assert out[-1] == Finish("tool_calls", 3, 4, model="fake-model")


async def test_429_and_5xx_are_retried_with_backoff(fake_openai: FakeOpenAI) -> None:
    rate = Status(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})
    fake_openai.push(rate, Status(503, {"error": {"message": "busy"}}), answer("fine"))
    out = await collect(model(fake_openai))
    assert "".join(c.text for c in out if isinstance(c, TextDelta)) == "fine"
    assert len(fake_openai.requests) == 3


async def test_persistent_5xx_gives_up_with_model_unavailable(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.default = Status(500, {"error": {"message": "boom"}})
    with pytest.raises(ModelError) as info:
        await collect(model(fake_openai))
    assert info.value.code == "model_unavailable"
    assert "boom" in info.value.message
    assert len(fake_openai.requests) == 3


async def test_a_4xx_is_a_clear_error_without_retry(fake_openai: FakeOpenAI) -> None:
    body = {"error": {"message": "Invalid model name", "type": "invalid_request_error"}}
    fake_openai.push(Status(400, body))
    with pytest.raises(ModelError) as info:
        await collect(model(fake_openai))
    assert info.value.code == "model_rejected"
    assert info.value.status == 400
    assert info.value.message == "Invalid model name"
    assert len(fake_openai.requests) == 1


async def test_an_error_chunk_in_the_stream_is_a_model_error(
    fake_openai: FakeOpenAI,
) -> None:
    error = {"error": {"message": "context length exceeded", "code": "ctx"}}
    fake_openai.push(Stream([*text_chunks("par"), error]))
    with pytest.raises(ModelError) as info:
        await collect(model(fake_openai))
    assert info.value.code == "model_error"
    assert "context length exceeded" in info.value.message


async def test_a_connection_dropped_before_output_is_retried(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.push(Stream(text_chunks("lost"), cut_after=0), answer("second try"))
    out = await collect(model(fake_openai))
    assert "".join(c.text for c in out if isinstance(c, TextDelta)) == "second try"
    assert len(fake_openai.requests) == 2


def text_of(out: list[ModelChunk]) -> str:
    """The answer as a consumer that honours ``discard`` keeps it."""
    text = ""
    for c in out:
        if isinstance(c, Retrying) and c.discard:
            text = ""
        elif isinstance(c, TextDelta):
            text += c.text
    return text


@pytest.mark.parametrize(
    ("broken", "cause"),
    [
        (Stream(text_chunks("half an answer"), done=False), "disconnect"),
        (Stream(text_chunks("half an answer"), done=False, clean=True), "truncated"),
        (Stream([*text_chunks("half"), "{not json", chunk({}, "stop")]), "malformed"),
        (Stream(text_chunks("half an answer"), stall_after=2), "stall"),
        # [DONE] but no finish reason: still not a whole answer
        (Stream(text_chunks("half an answer")), "truncated"),
    ],
)
async def test_a_stream_broken_after_output_is_withdrawn_and_retried(
    fake_openai: FakeOpenAI, broken: Stream, cause: str
) -> None:
    fake_openai.push(broken, answer("the whole answer", usage=(9, 4)))
    out = await collect(model(fake_openai, stall_s=0.3))
    retries = [c for c in out if isinstance(c, Retrying)]
    assert len(retries) == 1
    assert retries[0].cause == cause
    assert retries[0].discard is True
    assert retries[0].attempt == 1
    assert retries[0].lost_s >= retries[0].delay_s > 0
    assert text_of(out) == "the whole answer"
    assert out[-1] == Finish("stop", 9, 4, model="fake-model")
    assert fake_openai.requests[0] == fake_openai.requests[1]  # the same request


async def test_a_stream_that_keeps_breaking_gives_up_as_model_unavailable(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.default = Stream(text_chunks("again"), done=False, clean=True)
    with pytest.raises(ModelError) as info:
        await collect(model(fake_openai))
    assert info.value.code == "model_unavailable"
    assert "truncated" in info.value.message
    assert len(fake_openai.requests) == 3


async def test_retry_after_ms_is_honoured_over_backoff(fake_openai: FakeOpenAI) -> None:
    headers = {"retry-after-ms": "150", "Retry-After": "1"}
    fake_openai.push(Status(429, {"error": {"message": "slow"}}, headers), answer("ok"))
    out = await collect(model(fake_openai))
    retry = next(c for c in out if isinstance(c, Retrying))
    assert retry.delay_s == pytest.approx(0.15)
    assert retry.cause == "http_429"
    assert retry.discard is False


async def test_backoff_grows_without_retry_after(fake_openai: FakeOpenAI) -> None:
    busy = Status(503, {"error": {"message": "busy"}})
    fake_openai.push(busy, busy, busy, answer("ok"))
    out = await collect(model(fake_openai, max_retries=3, retry_base_s=0.02))
    delays = [c.delay_s for c in out if isinstance(c, Retrying)]
    assert len(delays) == 3
    assert delays[0] < delays[1] < delays[2]


async def test_usage_the_provider_omits_is_estimated_and_marked(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.push(Stream([*text_chunks("four words of text"), chunk({}, "stop")]))
    out = await collect(model(fake_openai))
    finish = out[-1]
    assert isinstance(finish, Finish)
    assert finish.estimated is True
    assert finish.output_tokens > 0
    assert finish.input_tokens > 0
    assert fake_openai.requests[0]["stream_options"] == {"include_usage": True}


async def test_cached_prompt_tokens_are_reported(fake_openai: FakeOpenAI) -> None:
    usage = usage_chunk(100, 5)
    usage["usage"]["prompt_tokens_details"] = {"cached_tokens": 64}
    fake_openai.push(Stream([*text_chunks("hi"), chunk({}, "stop"), usage]))
    out = await collect(model(fake_openai))
    assert out[-1] == Finish("stop", 100, 5, 64, model="fake-model")


def test_the_key_stays_out_of_the_repr() -> None:
    client = OpenAIChatModel("http://x/v1", "sk-very-secret", "m")
    assert "sk-very-secret" not in repr(client)


async def test_the_first_chunk_may_take_longer_than_a_stall(
    fake_openai: FakeOpenAI,
) -> None:
    slow = answer("thought first")
    slow.first_delay_s = 0.5
    fake_openai.push(slow)
    out = await collect(model(fake_openai, stall_s=0.1, timeout_s=10.0))
    assert not [c for c in out if isinstance(c, Retrying)]
    assert text_of(out) == "thought first"


async def test_a_provider_refusing_stream_options_is_asked_without_them(
    fake_openai: FakeOpenAI,
) -> None:
    refused = {"error": {"message": "Unrecognized request argument: stream_options"}}
    fake_openai.push(
        Status(400, refused),
        Stream([*text_chunks("no usage here"), chunk({}, "stop")]),
        Stream([*text_chunks("nor here"), chunk({}, "stop")]),
    )
    client = model(fake_openai)
    try:
        first = [c async for c in client.stream(MESSAGES, TOOLS)]
        await collect(client)
    finally:
        await client.close()
    assert text_of(first) == "no usage here"
    finish = first[-1]
    assert isinstance(finish, Finish)
    assert finish.estimated is True
    assert "stream_options" in fake_openai.requests[0]
    assert "stream_options" not in fake_openai.requests[1]
    assert "stream_options" not in fake_openai.requests[2]  # not asked again
