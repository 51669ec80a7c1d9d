"""Pytest plugin: fake model providers as real HTTP servers, one per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_openai import FakeOpenAI
from tests.support.llmock import CHAOS, LLMock


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    """A fake OpenAI-compatible server (``tests/support/fake_openai.py``)."""
    server = FakeOpenAI()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def llmock_chaos(tmp_path: Path) -> AsyncIterator[LLMock]:
    """``llmock serve`` with every error and stream fault enabled, seeded."""
    server = LLMock(tmp_path / "llmock.log", seed=17, flags=CHAOS)
    try:
        await server.ready()
        yield server
    finally:
        server.stop()


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    """A fake Anthropic Messages server (``tests/support/fake_anthropic.py``)."""
    server = FakeAnthropic()
    await server.start()
    yield server
    await server.stop()
