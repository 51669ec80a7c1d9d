"""Shared fixtures of the security suite: a real sandbox host, two sandboxes.

Every test here runs an attack from issue 10 against the real ``agentbus
sandboxhost`` (bubblewrap when this machine has it) through the real e2b SDK
and asserts that it fails. The sandboxes are shared per module to keep the
suite fast; a test that must damage its sandbox makes its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from e2b import AsyncSandbox

from tests.plugins.sandboxhost import SandboxHostProcess
from tests.support.sandboxhost import opts


@pytest.fixture(scope="module")
async def victim(sandboxhost: SandboxHostProcess) -> AsyncIterator[AsyncSandbox]:
    """The sandbox under attack (another tenant's)."""
    sandbox = await AsyncSandbox.create(timeout=300, **opts(sandboxhost))
    yield sandbox
    await sandbox.kill()


@pytest.fixture(scope="module")
async def attacker(sandboxhost: SandboxHostProcess) -> AsyncIterator[AsyncSandbox]:
    """The sandbox running hostile code."""
    sandbox = await AsyncSandbox.create(timeout=300, **opts(sandboxhost))
    yield sandbox
    await sandbox.kill()


def isolated(host: SandboxHostProcess) -> None:
    """Skip unless the host really isolates (bubblewrap available here)."""
    if host.info()["isolation"] != "bwrap":
        pytest.skip("bubblewrap is not available on this machine")
