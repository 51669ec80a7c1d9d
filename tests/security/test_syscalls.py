"""Seccomp: namespaces, mounts, bpf, perf, keyctl and ptrace are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from e2b import AsyncSandbox

from tests.plugins.sandboxhost import SandboxHostProcess
from tests.security.conftest import isolated

SCRIPT = (Path(__file__).parent / "scripts" / "syscalls.py").read_text()
REFUSED = {
    "unshare(CLONE_NEWUSER)": "EPERM",
    "unshare(CLONE_NEWNS)": "EPERM",
    "clone(CLONE_NEWUSER)": "EPERM",
    "clone(CLONE_NEWNET)": "EPERM",
    "mount": "EPERM",
    "bpf": "EPERM",
    "perf_event_open": "EPERM",
    "keyctl": "EPERM",
    "ptrace(ATTACH supervisor)": "EPERM",
    "/proc/supervisor/mem": "EACCES",
    "unshare -Ur (util-linux)": "1",
}
STILL_WORKS = {"fork+exec": "0", "thread": "ok", "semaphore": "ok"}


async def test_escape_syscalls_are_refused_and_normal_ones_work(
    sandboxhost: SandboxHostProcess, attacker: AsyncSandbox
) -> None:
    isolated(sandboxhost)
    await attacker.files.write("/tmp/syscalls.py", SCRIPT)
    got = await attacker.commands.run("python3 /tmp/syscalls.py", timeout=30)
    assert json.loads(got.stdout) == {**REFUSED, **STILL_WORKS}


async def test_node_spawns_children_under_the_filter(
    sandboxhost: SandboxHostProcess, attacker: AsyncSandbox
) -> None:
    isolated(sandboxhost)
    if shutil.which("node") is None:
        pytest.skip("node is not installed on this host")
    js = "console.log(require('child_process').execSync('echo hi').toString())"
    got = await attacker.commands.run(f'node -e "{js}"', timeout=30)
    assert got.stdout.strip() == "hi"
