"""The sandbox tools against the real local sandbox host."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.envd import EnvdClient, SandboxTools
from tests.contract.envd.sandboxes import sandbox
from tests.plugins.sandboxhost import sandboxhost  # noqa: F401 - fixture


@pytest.fixture
async def tools(sandboxhost: object) -> AsyncIterator[SandboxTools]:  # noqa: F811
    """Tools on a fresh sandbox (an empty /workspace) per test."""
    async with (
        sandbox(sandboxhost) as ref,
        EnvdClient(ref.url, ref.sandbox_id, ref.access_token) as client,
    ):
        yield SandboxTools(client)
