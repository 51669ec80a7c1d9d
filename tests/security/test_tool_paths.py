"""Every tool resolves every component of a path: ``ln -s / r`` leads nowhere."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from services.envd import EnvdClient, PathRefused, SandboxTools
from tests.contract.envd.sandboxes import sandbox
from tests.plugins.sandboxhost import SandboxHostProcess


@pytest.fixture(scope="module")
async def tools(sandboxhost: SandboxHostProcess) -> AsyncIterator[SandboxTools]:
    """Tools on one sandbox whose workspace holds ``r -> /`` and ``d/r -> /``."""
    async with (
        sandbox(sandboxhost) as ref,
        EnvdClient(ref.url, ref.sandbox_id, ref.access_token) as client,
    ):
        tools = SandboxTools(client)
        await tools.bash("ln -s / r && mkdir -p d/in && ln -s / d/r && echo k > d/in/f")
        yield tools


ATTACKS: dict[str, Callable[[SandboxTools], Awaitable[Any]]] = {
    "write r/tmp/x": lambda t: t.write("r/tmp/x", "pwned"),
    "write d/r/tmp/x": lambda t: t.write("d/r/tmp/x", "pwned"),
    "read r/etc/hostname": lambda t: t.read("r/etc/hostname"),
    "read d/r/etc/passwd": lambda t: t.read("d/r/etc/passwd"),
    "edit r/etc/hostname": lambda t: t.edit("r/etc/hostname", "a", "b"),
    "ls r/etc": lambda t: t.ls("r/etc"),
    "ls r": lambda t: t.ls("r"),
    "glob r/etc/*": lambda t: t.glob("r/etc/*"),
    "glob */etc/passwd": lambda t: t.glob("*/etc/passwd"),
    "glob in d: r/*": lambda t: t.glob("r/*", "d"),
    "grep r/etc": lambda t: t.grep("root", "r/etc"),
    "grep d/r/etc": lambda t: t.grep("root", "d/r/etc"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_symlinked_parent_is_refused(tools: SandboxTools, attack: str) -> None:
    # A command ends the cache generation: each attack starts cold, as an
    # agent's would after ``ln -s``.
    await tools.bash("true")
    with pytest.raises(PathRefused) as refused:
        await ATTACKS[attack](tools)
    assert refused.value.code == "path_outside_workspace"


async def test_nothing_was_written_outside(tools: SandboxTools) -> None:
    got = await tools.bash("ls /tmp/x 2>&1; echo rc=$?")
    assert "rc=2" in got.output


async def test_the_workspace_itself_still_works(tools: SandboxTools) -> None:
    await tools.bash("true")
    assert (await tools.read("d/in/f")).content == "k\n"
    assert "d/in/f" in (await tools.glob("**/f")).paths
    names = {e.name for e in (await tools.ls("d")).entries}
    assert names == {"in", "r"}  # the link itself may be listed
    assert (await tools.grep("k", "d/in")).exit_code == 0
