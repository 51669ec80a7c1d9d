"""The language server in a real sandbox (installed there on first use)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.envd import EnvdClient, EnvdInvalidArgument, SandboxTools
from services.pool.hands import LspArgs
from services.pool.toolbox import execute
from tests.contract.envd.sandboxes import sandbox
from tests.plugins.sandboxhost import sandboxhost  # noqa: F401 - fixture

LIB = "def area(width, height):\n    return width * height\n"
MAIN = "from lib import area\n\nprint(area(2, 3))\nprint(undefined_name)\n"


@pytest.fixture
async def tools(sandboxhost: object) -> AsyncIterator[SandboxTools]:  # noqa: F811
    async with (
        sandbox(sandboxhost) as ref,
        EnvdClient(ref.url, ref.sandbox_id, ref.access_token) as client,
    ):
        tools = SandboxTools(client)
        yield tools
        await tools.language_servers.close()


async def ask(tools: SandboxTools, **args: object) -> str:
    run = await execute(tools, LspArgs(**args))  # type: ignore[arg-type]
    assert run.outcome.ok, run.outcome.error
    return run.outcome.output


async def test_diagnostics_definition_and_a_reattaching_client(
    tools: SandboxTools,
) -> None:
    await tools.write("pkg/lib.py", LIB)
    await tools.write("pkg/main.py", MAIN)
    found = await ask(tools, action="diagnostics", path="pkg/main.py")
    assert "pkg/main.py:4:7: error: undefined name 'undefined_name'" in found
    where = await ask(tools, action="definition", path="pkg/main.py", line=3, column=7)
    assert where == "pkg/lib.py:1:5"
    symbols = await ask(tools, action="symbols", path="pkg/lib.py")
    assert "1: function area" in symbols
    first = tools.language_servers._server
    assert first is not None
    assert first.started
    # A second client (another worker) reattaches to the same server.
    other = SandboxTools(
        EnvdClient(tools.client.base_url, tools.client.sandbox_id, None)
    )
    other.client = tools.client
    again = await ask(other, action="hover", path="pkg/lib.py", line=1, column=5)
    assert "area" in again
    second = other.language_servers._server
    assert second is not None
    assert not second.started
    await other.language_servers.close()


async def test_bad_requests_are_named(tools: SandboxTools) -> None:
    await tools.write("a.py", "x = 1\n")
    with pytest.raises(EnvdInvalidArgument, match="needs line and column"):
        await tools.language_servers.query("definition", "/workspace/a.py", None, 1)
    run = await execute(tools, LspArgs(action="hover", path="../etc/passwd"))
    assert not run.outcome.ok
