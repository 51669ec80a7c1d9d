"""Pytest plugin: fake model providers as real HTTP servers, one per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.fake_openai import FakeOpenAI


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    """A fake OpenAI-compatible server (``tests/support/fake_openai.py``)."""
    server = FakeOpenAI()
    await server.start()
    yield server
    await server.stop()
