"""AnthropicModel against a fake server streaming the Messages wire format."""

from __future__ import annotations

import json

import pytest

from services.pool.errors import ModelError
from services.pool.models.anthropic import AnthropicModel
from services.pool.models.base import (
    Finish,
    ModelChunk,
    Retrying,
    TextDelta,
    ThoughtDelta,
    ToolRequest,
)
from tests.support.fake_anthropic import (
    FakeAnthropic,
    Reply,
    Status,
    end,
    overloaded,
    start,
    text_block,
    text_reply,
    thinking_block,
    tool_block,
)

PATH = {"type": "string"}
SYSTEM = {"role": "system", "content": "You are a coding agent."}
MESSAGES = [SYSTEM, {"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "ls",
            "description": "list a directory",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
            },
        },
    }
]


def model(server: FakeAnthropic, **over: object) -> AnthropicModel:
    kwargs: dict[str, object] = {"max_retries": 2, "retry_base_s": 0.01}
    kwargs.update(over)
    return AnthropicModel(server.url, "sk-ant-secret", "claude-fake", **kwargs)  # type: ignore[arg-type]


async def collect(
    client: AnthropicModel, messages: list[dict[str, object]] = MESSAGES
) -> list[ModelChunk]:
    try:
        return [c async for c in client.stream(messages, TOOLS)]
    finally:
        await client.close()


def text_of(out: list[ModelChunk]) -> str:
    text = ""
    for c in out:
        if isinstance(c, Retrying) and c.discard:
            text = ""
        elif isinstance(c, TextDelta):
            text += c.text
    return text


async def test_text_streams_with_cached_usage_and_the_request_is_native(
    fake_anthropic: FakeAnthropic,
) -> None:
    usage = {
        "input_tokens": 7,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 40,
        "output_tokens": 1,
    }
    fake_anthropic.push(text_reply("Hello from Claude.", usage))
    out = await collect(model(fake_anthropic))
    assert text_of(out) == "Hello from Claude."
    assert out[-1] == Finish("stop", 947, 5, 900, model="claude-fake")
    body = fake_anthropic.requests[0]
    assert body["stream"] is True
    assert body["model"] == "claude-fake"
    assert body["max_tokens"] > 0
    assert body["system"] == [
        {
            "type": "text",
            "text": "You are a coding agent.",
            "cache_control": {"type": "ephemeral"},
        }
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
            ],
        }
    ]
    assert body["tools"][0]["name"] == "ls"
    assert body["tools"][0]["input_schema"]["properties"] == {
        "path": {"type": "string"}
    }
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    headers = fake_anthropic.headers[0]
    assert headers["x-api-key"] == "sk-ant-secret"
    assert headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in headers


async def test_thinking_text_and_tool_use_and_the_history_sent_back(
    fake_anthropic: FakeAnthropic,
) -> None:
    args = json.dumps({"path": "/workspace"})
    fake_anthropic.push(
        Reply(
            [
                start(),
                *thinking_block(0, "Look first.", "sig-123"),
                *text_block(1, "Listing."),
                *tool_block(2, "toolu_1", "ls", args),
                *end("tool_use", 12),
            ]
        ),
        text_reply("Two files."),
    )
    client = model(fake_anthropic, thinking_budget=1024, max_tokens=4096)
    out = [c async for c in client.stream(MESSAGES, TOOLS)]
    assert [c.text for c in out if isinstance(c, ThoughtDelta)] == ["Look first."]
    assert text_of(out) == "Listing."
    assert [c for c in out if isinstance(c, ToolRequest)] == [
        ToolRequest("toolu_1", "ls", args)
    ]
    assert out[-1] == Finish("tool_calls", 10, 12, model="claude-fake")
    assert fake_anthropic.requests[0]["thinking"] == {
        "type": "enabled",
        "budget_tokens": 1024,
    }
    # The fold's next messages: the assistant's text and call, the tool result.
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": "Listing.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "ls", "arguments": args},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "a.py\nb.py"},
    ]
    out = await collect(client, history)
    assert text_of(out) == "Two files."
    sent = fake_anthropic.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == [
        {"type": "thinking", "thinking": "Look first.", "signature": "sig-123"},
        {"type": "text", "text": "Listing."},
        {"type": "tool_use", "id": "toolu_1", "name": "ls",
         "input": {"path": "/workspace"}},
    ]  # fmt: skip
    assert sent[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": "a.py\nb.py",
            "cache_control": {"type": "ephemeral"},
        }
    ]


HALF = text_reply("half an answer").events


@pytest.mark.parametrize(
    ("broken", "cause"),
    [
        (Reply(HALF, cut_after=4), "disconnect"),
        (Reply(HALF, cut_after=4, clean=True), "truncated"),
        (
            Reply([*text_reply("half").events[:4],
                   ("error", {"type": "error", "error": {"type": "overloaded_error",
                                                         "message": "Overloaded"}})]),
            "overloaded_error",
        ),
    ],
)  # fmt: skip
async def test_a_broken_stream_is_withdrawn_and_retried(
    fake_anthropic: FakeAnthropic, broken: Reply, cause: str
) -> None:
    fake_anthropic.push(broken, text_reply("the whole answer"))
    out = await collect(model(fake_anthropic))
    retries = [c for c in out if isinstance(c, Retrying)]
    assert [(r.cause, r.discard) for r in retries] == [(cause, True)]
    assert text_of(out) == "the whole answer"
    assert fake_anthropic.requests[0] == fake_anthropic.requests[1]


async def test_529_overloaded_is_retried_and_a_400_is_not(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.push(overloaded(), text_reply("fine"))
    out = await collect(model(fake_anthropic))
    assert text_of(out) == "fine"
    assert [c.cause for c in out if isinstance(c, Retrying)] == ["http_529"]
    bad = {"type": "error", "error": {"type": "invalid_request_error",
                                      "message": "max_tokens: required"}}  # fmt: skip
    fake_anthropic.push(Status(400, bad))
    with pytest.raises(ModelError) as info:
        await collect(model(fake_anthropic))
    assert info.value.code == "model_rejected"
    assert info.value.message == "max_tokens: required"
    assert len(fake_anthropic.requests) == 3


async def test_an_error_event_that_is_not_transient_is_a_model_error(
    fake_anthropic: FakeAnthropic,
) -> None:
    error = {"type": "error", "error": {"type": "invalid_request_error",
                                        "message": "prompt is too long"}}  # fmt: skip
    fake_anthropic.push(Reply([start(), ("error", error)]))
    with pytest.raises(ModelError) as info:
        await collect(model(fake_anthropic))
    assert info.value.code == "model_error"
    assert info.value.message == "prompt is too long"


async def test_prompt_cache_off_sends_plain_blocks(
    fake_anthropic: FakeAnthropic,
) -> None:
    await collect(model(fake_anthropic, prompt_cache=False))
    body = json.dumps(fake_anthropic.requests[0])
    assert "cache_control" not in body
    assert "thinking" not in fake_anthropic.requests[0]


def test_the_key_stays_out_of_the_repr() -> None:
    assert "sk-ant" not in repr(AnthropicModel("http://x", "sk-ant-very-secret", "m"))
