"""The fake OpenAI-compatible server, one per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.contract.pool.fake_openai import FakeOpenAI


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    server = FakeOpenAI()
    await server.start()
    yield server
    await server.stop()
