"""Fallback models: after N consecutive failures the response goes on on the next."""

from __future__ import annotations

import msgspec
import pytest

from services.pool.errors import ModelError
from services.pool.models.anthropic import AnthropicModel
from services.pool.models.base import Finish, ModelChunk, Retrying, TextDelta
from services.pool.models.factory import make_model, parse_fallbacks
from services.pool.models.fallback import FallbackModel
from services.pool.models.openai import OpenAIChatModel
from services.pool.settings import PoolSettings
from tests.support.fake_anthropic import FakeAnthropic, text_reply
from tests.support.fake_openai import FakeOpenAI, Status, Stream, text_chunks

MESSAGES = [{"role": "user", "content": "hi"}]
BUSY = Status(503, {"error": {"message": "busy"}})


def pair(openai: FakeOpenAI, anthropic: FakeAnthropic, after: int) -> FallbackModel:
    first = OpenAIChatModel(
        openai.url, "k", "gpt-fake", max_retries=after - 1, retry_base_s=0.01
    )
    second = AnthropicModel(anthropic.url, "k", "claude-fake", retry_base_s=0.01)
    return FallbackModel(
        [("openai:gpt-fake", first), ("anthropic:claude-fake", second)], after
    )


async def collect(model: FallbackModel) -> list[ModelChunk]:
    return [c async for c in model.stream(MESSAGES, [])]


async def test_after_n_failures_the_next_model_answers_and_stays(
    fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    fake_openai.default = BUSY
    model = pair(fake_openai, fake_anthropic, after=3)
    try:
        out = await collect(model)
        causes = [c.cause for c in out if isinstance(c, Retrying)]
        assert causes == ["http_503", "http_503", "fallback"]
        assert "".join(c.text for c in out if isinstance(c, TextDelta))
        finish = out[-1]
        assert isinstance(finish, Finish)
        assert finish.model == "claude-fake"
        assert len(fake_openai.requests) == 3
        await collect(model)  # the switch sticks
        assert len(fake_openai.requests) == 3
        assert len(fake_anthropic.requests) == 2
    finally:
        await model.close()


async def test_output_of_the_failed_model_is_withdrawn(
    fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    fake_openai.default = Stream(text_chunks("half of it"), done=False)
    fake_anthropic.push(text_reply("all of it"))
    model = pair(fake_openai, fake_anthropic, after=1)
    try:
        out = await collect(model)
    finally:
        await model.close()
    retry = next(c for c in out if isinstance(c, Retrying))
    assert (retry.cause, retry.discard) == ("fallback", True)
    after = out[out.index(retry) :]
    assert "".join(c.text for c in after if isinstance(c, TextDelta)) == "all of it"


async def test_a_rejected_request_does_not_fall_back(
    fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    fake_openai.push(Status(401, {"error": {"message": "bad key"}}))
    model = pair(fake_openai, fake_anthropic, after=2)
    try:
        with pytest.raises(ModelError) as info:
            await collect(model)
    finally:
        await model.close()
    assert info.value.code == "model_rejected"
    assert fake_anthropic.requests == []


def test_the_fallback_list_is_parsed_and_a_bad_entry_named() -> None:
    specs = parse_fallbacks(
        "anthropic:claude-x, openai:deepseek-reasoner@http://h/v1", "key"
    )
    assert [(s.kind, s.name, s.url) for s in specs] == [
        ("anthropic", "claude-x", "https://api.anthropic.com"),
        ("openai", "deepseek-reasoner", "http://h/v1"),
    ]
    with pytest.raises(ValueError, match="'gemini:x' is not kind:name"):
        parse_fallbacks("openai:a,gemini:x", None)


async def test_make_model_gives_each_model_but_the_last_n_attempts() -> None:
    settings = msgspec.convert(
        {
            "model": "openai",
            "model_max_retries": 6,
            "model_fallbacks": "anthropic:claude-x,openai:other@http://h/v1",
            "model_fallback_after": 2,
        },
        PoolSettings,
    )
    model = make_model(settings)
    assert isinstance(model, FallbackModel)
    try:
        retries = [m.policy.max_retries for _, m in model.models]  # type: ignore[attr-defined]
        assert retries == [1, 1, 6]
        assert [label for label, _ in model.models] == [
            "openai:deepseek-chat",
            "anthropic:claude-x",
            "openai:other",
        ]
    finally:
        await model.close()
