"""A sandbox cannot reach host files, other sandboxes' tokens, or host secrets."""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from e2b import AsyncSandbox, CommandExitException
from e2b.exceptions import (
    FileNotFoundException,
    InvalidArgumentException,
    NotFoundException,
    SandboxException,
)

from tests.plugins.sandboxhost import SandboxHostProcess
from tests.support.sandboxhost import control, opts

FAKE_SECRETS = {
    "AGENTBUS_MODEL_API_KEY": "sk-model-" + secrets.token_hex(12),
    "AGENTBUS_NATS_PASSWORD": "nats-pass-" + secrets.token_hex(12),
    "AGENTBUS_DEVICE_SECRET": "device-" + secrets.token_hex(12),
    "NATS_CREDS": "creds-" + secrets.token_hex(12),
}


@pytest.fixture
async def sbx(sandboxhost: SandboxHostProcess) -> AsyncIterator[AsyncSandbox]:
    """A fresh sandbox on the session's host."""
    sandbox = await AsyncSandbox.create(timeout=120, **opts(sandboxhost))
    yield sandbox
    await sandbox.kill()


@pytest.fixture
def host_secret(tmp_path: Path) -> tuple[Path, str]:
    """A file on the host, outside every sandbox, holding a secret."""
    value = "host-secret-" + secrets.token_hex(8)
    path = tmp_path / "secret.txt"
    path.write_text(value)
    return path, value


ESCAPES_ERRORS = (FileNotFoundException, InvalidArgumentException, NotFoundException)


async def test_symlinks_and_dotdot_never_reach_host_files(
    sbx: AsyncSandbox, sandboxhost: SandboxHostProcess, host_secret: tuple[Path, str]
) -> None:
    secret_path, value = host_secret
    key_file = sandboxhost.data_dir / "api_key"
    await sbx.commands.run(
        f"ln -s {secret_path} /workspace/to-secret"
        f" && ln -s {key_file} /workspace/to-key && ln -s / /workspace/rootlink"
        f" && ln -s {secret_path.parent} /workspace/to-dir"
    )
    candidates = [
        "/workspace/to-secret",
        "/workspace/to-key",
        f"/workspace/rootlink{secret_path}",
        f"/workspace/../../..{secret_path}",
        f"../../../..{secret_path}",
        f"/workspace/to-dir/{secret_path.name}",
        str(secret_path),
        str(key_file),
    ]
    for path in candidates:
        with pytest.raises(ESCAPES_ERRORS):
            await sbx.files.read(path)
    # The links themselves exist in the sandbox; what they point at does not.
    for path in candidates[2:]:
        assert not await sbx.files.exists(path)
        with pytest.raises(ESCAPES_ERRORS):
            await sbx.files.get_info(path)
    with pytest.raises(ESCAPES_ERRORS):
        await sbx.files.list(str(secret_path.parent))
    with pytest.raises(ESCAPES_ERRORS):
        await sbx.files.list("/workspace/to-dir")
    with pytest.raises(ESCAPES_ERRORS):
        await sbx.files.watch_dir("/workspace/to-dir", lambda e: None)
    with pytest.raises(CommandExitException):
        await sbx.commands.run(f"cat {secret_path} /workspace/to-secret")
    assert secret_path.read_text() == value


async def test_writes_moves_and_removes_through_symlinks_stay_in_the_sandbox(
    sbx: AsyncSandbox, host_secret: tuple[Path, str]
) -> None:
    secret_path, value = host_secret
    planted = secret_path.parent / "planted.txt"
    await sbx.commands.run(
        f"ln -s {secret_path} /workspace/to-secret"
        f" && ln -s {secret_path.parent} /workspace/d"
    )
    # The link's target resolves in the sandbox's own root view, where that
    # directory does not exist: the write fails like `mkdir -p` would.
    with pytest.raises(SandboxException):
        await sbx.files.write("/workspace/d/planted.txt", "pwned")
    await sbx.files.write(f"/workspace/../..{planted}", "inside only")
    assert not planted.exists()
    with pytest.raises(ESCAPES_ERRORS):
        await sbx.files.rename(str(secret_path), "/workspace/stolen.txt")
    # The write above made that directory inside the sandbox: now the link
    # resolves there, and only there.
    assert await sbx.files.make_dir("/workspace/d/newdir")
    await sbx.files.remove("/workspace/to-secret")
    await sbx.files.remove(str(secret_path))
    assert secret_path.read_text() == value
    assert not (secret_path.parent / "newdir").exists()


def _envd(
    host: SandboxHostProcess, sandbox_id: str, token: str | None, path: str, body: bytes
) -> int:
    headers = {"E2b-Sandbox-Id": sandbox_id, "Content-Type": "application/json"}
    if token is not None:
        headers["X-Access-Token"] = token
    method = "GET" if path.startswith("/files?") else "POST"
    req = urllib.request.Request(
        host.url + path,
        data=None if method == "GET" else body,
        headers=headers,
        method=method,
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


def test_envd_refuses_missing_and_foreign_access_tokens(
    sandboxhost: SandboxHostProcess,
) -> None:
    _, a = control(sandboxhost, "POST", "/v2/sandboxes", {"templateID": "base"})
    _, b = control(sandboxhost, "POST", "/v2/sandboxes", {"templateID": "base"})
    try:
        a_id, a_tok, b_tok = a["sandboxID"], a["envdAccessToken"], b["envdAccessToken"]
        stat = ("/filesystem.Filesystem/Stat", b'{"path":"/workspace"}')
        listing = ("/process.Process/List", b"{}")
        read = ("/files?path=/etc/hostname", b"")
        for path, body in (stat, listing, read):
            assert _envd(sandboxhost, a_id, None, path, body) == 401
            assert _envd(sandboxhost, a_id, b_tok, path, body) == 401
        assert _envd(sandboxhost, a_id, a_tok, *stat) == 200
        assert _envd(sandboxhost, a_id, a_tok, *listing) == 200
    finally:
        control(sandboxhost, "DELETE", f"/sandboxes/{a['sandboxID']}")
        control(sandboxhost, "DELETE", f"/sandboxes/{b['sandboxID']}")


async def test_sandbox_env_and_files_hold_no_host_secret(sandboxhost_factory) -> None:  # type: ignore[no-untyped-def]
    import os

    env = dict(os.environ, **FAKE_SECRETS)
    host: SandboxHostProcess = sandboxhost_factory(env=env)
    sandbox = await AsyncSandbox.create(timeout=60, **opts(host))
    try:
        result = await sandbox.commands.run(
            "env; cat /proc/self/environ; cat /proc/1/environ 2>/dev/null; true"
        )
        for value in FAKE_SECRETS.values():
            assert value not in result.stdout
        pattern = "|".join(FAKE_SECRETS.values())
        scan = await sandbox.commands.run(
            f"grep -rsIlE '{pattern}' /etc /home /workspace /tmp /run /var /dev/shm"
            f" /proc/[0-9]*/environ /proc/[0-9]*/cmdline; echo scanned",
            timeout=60,
        )
        assert scan.stdout.strip() == "scanned"
        visible = await sandbox.commands.run(
            "ls /root /work /old_root 2>&1; ls /home; echo $HOME"
        )
        assert visible.stdout.splitlines()[-2:] == ["user", "/home/user"]
        assert "No such file" in visible.stdout
        key = (
            await sandbox.commands.run(f"cat {host.data_dir}/api_key || true")
        ).stdout
        assert host.api_key not in key
    finally:
        await sandbox.kill()


async def test_fifos_and_devices_are_refused_and_the_host_stays_responsive(
    sbx: AsyncSandbox,
) -> None:
    # A writer keeps the FIFO open: a blocking read on the host would hang it.
    await sbx.commands.run(
        "mkfifo /workspace/pipe && (sleep 30 > /workspace/pipe &)", timeout=10
    )
    with pytest.raises(InvalidArgumentException):
        await sbx.files.read("/workspace/pipe")
    with pytest.raises(InvalidArgumentException):
        await sbx.files.read("/dev/zero")
    with pytest.raises((InvalidArgumentException, SandboxException)):
        await sbx.files.write("/dev/null", "x")
    await sbx.files.write("/workspace/after.txt", "still serving")
    assert await sbx.files.read("/workspace/after.txt") == "still serving"


async def test_sandbox_runs_unprivileged_in_its_own_pid_namespace(
    sbx: AsyncSandbox,
) -> None:
    result = await sbx.commands.run(
        "id -u; grep -E 'CapEff|NoNewPrivs' /proc/self/status;"
        " ls /proc | grep -c '^[0-9]'"
    )
    lines = result.stdout.split()
    assert lines[0] != "0"
    assert "0000000000000000" in result.stdout
    assert int(lines[-1]) < 10  # only the sandbox's own few processes
