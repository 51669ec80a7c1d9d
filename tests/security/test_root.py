"""``user="root"`` and ``sudo``: uid 0 in the sandbox's own user namespace only."""

from __future__ import annotations

import pytest
from e2b import AsyncSandbox, CommandExitException

from tests.plugins.sandboxhost import SandboxHostProcess
from tests.security.conftest import isolated

RAW = "import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)"


async def run(sbx: AsyncSandbox, cmd: str, **kw: object) -> str:
    """stdout+stderr of a command, whatever its exit code."""
    try:
        got = await sbx.commands.run(cmd, timeout=30, **kw)  # type: ignore[arg-type]
    except CommandExitException as exc:
        return f"{exc.stdout}{exc.stderr}rc={exc.exit_code}"
    return f"{got.stdout}{got.stderr}rc=0"


async def test_root_and_sudo_are_uid_0(
    sandboxhost: SandboxHostProcess, attacker: AsyncSandbox
) -> None:
    isolated(sandboxhost)
    assert await run(attacker, "id -u", user="root") == "0\nrc=0"
    assert await run(attacker, "whoami", user="root") == "root\nrc=0"
    assert await run(attacker, "sudo id -u") == "0\nrc=0"
    assert await run(attacker, "sudo -E -- sh -c 'exit 7'") == "rc=7"
    user = await run(attacker, "id -u")
    assert user != "0\nrc=0"
    # Root owns the sandbox's files: it may take one from the user and back.
    out = await run(
        attacker,
        "echo x > /workspace/mine && sudo chown 0:0 /workspace/mine "
        "&& stat -c %u /workspace/mine && sudo chmod 600 /workspace/mine "
        "&& sudo cat /workspace/mine",
    )
    assert out.endswith("x\nrc=0"), out


@pytest.mark.parametrize(
    ("attack", "cmd"),
    [
        ("write the host's /usr", "touch /usr/bin/pwned"),
        ("mount", "mount -t tmpfs none /mnt"),
        ("drop the egress rules", "nft flush ruleset"),
        ("take the loopback down", "ip link set lo down"),
        ("new namespaces", "unshare -m true"),
        ("ptrace the supervisor", "cat /proc/2/mem"),
        ("load a module", "modprobe dummy"),
        ("raw packet socket", f"python3 -c '{RAW}'"),
    ],
)
async def test_root_has_no_power_over_the_host(
    sandboxhost: SandboxHostProcess, attacker: AsyncSandbox, attack: str, cmd: str
) -> None:
    isolated(sandboxhost)
    out = await run(attacker, f"sudo {cmd}")
    assert not out.endswith("rc=0"), f"{attack}: {out}"
    assert not (await run(attacker, cmd, user="root")).endswith("rc=0"), attack
