"""Contract tests of EnvdClient against the real local sandbox host."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from services.envd import EnvdClient
from tests.contract.envd.sandboxes import SandboxRef, sandbox
from tests.plugins.sandboxhost import sandboxhost  # noqa: F401 - fixture


@pytest.fixture(scope="module")
async def box(sandboxhost: object) -> AsyncIterator[SandboxRef]:  # noqa: F811
    """One sandbox shared by a module's tests (each test uses its own directory)."""
    async with sandbox(sandboxhost) as ref:
        yield ref


@pytest.fixture
async def client(box: SandboxRef) -> AsyncIterator[EnvdClient]:
    """A fresh client (round-trip counter at 0) on the module's sandbox."""
    async with EnvdClient(box.url, box.sandbox_id, box.access_token) as c:
        yield c


@pytest.fixture
def wdir() -> str:
    """A unique directory path under /workspace for one test."""
    return f"/workspace/t-{uuid.uuid4().hex[:10]}"
