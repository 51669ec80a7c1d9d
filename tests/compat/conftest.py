"""Point the unmodified e2b SDK (whichever version imports) at the sandbox host."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.plugins.sandboxhost import SandboxHostProcess


@pytest.fixture(scope="session", autouse=True)
def e2b_env(sandboxhost: SandboxHostProcess) -> Iterator[dict[str, str]]:
    """E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY of the session's host."""
    env = sandboxhost.env()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("E2B_DEBUG", raising=False)
        mp.delenv("E2B_DOMAIN", raising=False)
        yield env
