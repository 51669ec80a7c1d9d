"""OpenAIChatModel against a fake server streaming real chunk formats."""

from __future__ import annotations

import json

import pytest

from services.pool.errors import ModelError
from services.pool.models.base import (
    Finish,
    ModelChunk,
    TextDelta,
    ThoughtDelta,
    ToolRequest,
)
from services.pool.models.openai import OpenAIChatModel
from tests.contract.pool.fake_openai import (
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
    assert chunks[-1] == Finish("stop", 12, 7)
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
    assert out[-1] == Finish("tool_calls", 3, 4)


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


async def test_a_connection_dropped_mid_stream_is_stream_interrupted(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.push(Stream(text_chunks("half an answer"), done=False))
    seen: list[ModelChunk] = []
    client = model(fake_openai)

    async def consume() -> None:
        async for c in client.stream(MESSAGES, TOOLS):
            seen.append(c)

    with pytest.raises(ModelError) as info:
        await consume()
    await client.close()
    assert info.value.code == "stream_interrupted"
    assert seen
    assert len(fake_openai.requests) == 1


def test_the_key_stays_out_of_the_repr() -> None:
    client = OpenAIChatModel("http://x/v1", "sk-very-secret", "m")
    assert "sk-very-secret" not in repr(client)
