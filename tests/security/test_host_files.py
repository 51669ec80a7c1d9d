"""Files under the data dir are the host's: 0600 files, 0700 dirs; no /opt inside."""

from __future__ import annotations

import http.client
import stat
from pathlib import Path

from e2b import AsyncSandbox

from tests.plugins.sandboxhost import SandboxHostProcess
from tests.security.conftest import isolated

# Not secrets; the sandbox user reads them through its own read-only mounts,
# and they sit under 0700 directories that no other host user can enter.
SANDBOX_READABLE = {"passwd", "group", "resolv.conf", "sudo"}


OWN_FILES = {"fs", "upper", "work", "layers", "layer", "profile.d"}


def _loose(data_dir: Path) -> list[str]:
    """Host-owned entries readable or writable by group/other."""
    bad = []
    for path in [data_dir, *data_dir.rglob("*")]:
        rel = path.relative_to(data_dir)
        # The sandbox's own files and the read-only layers it sees (overlay
        # upper/work, snapshot and template layers), all below 0700 dirs.
        if OWN_FILES & set(rel.parts):
            continue
        if rel.parts[:1] == ("templates",) and path.suffix == ".json":
            continue  # recipes an operator (here: a test) writes; no secret

        st = path.lstat()
        if stat.S_ISLNK(st.st_mode) or path.name in SANDBOX_READABLE:
            continue
        if st.st_mode & 0o077:
            bad.append(f"{rel} {stat.filemode(st.st_mode)}")
    return bad


async def test_records_keys_and_dirs_are_owner_only(
    sandboxhost: SandboxHostProcess, victim: AsyncSandbox
) -> None:
    await victim.files.write("/workspace/a.txt", "x")
    data = sandboxhost.data_dir
    record = data / "sandboxes" / victim.sandbox_id / "record.json"
    assert victim._envd_access_token in record.read_text()  # the secret is there
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert _loose(data) == []
    sandbox_dir = record.parent
    assert stat.S_IMODE(sandbox_dir.stat().st_mode) == 0o700  # workspace behind it


async def test_host_opt_is_not_mounted(
    sandboxhost: SandboxHostProcess, attacker: AsyncSandbox
) -> None:
    isolated(sandboxhost)
    assert any(Path("/opt").iterdir()), "this test needs a non-empty host /opt"
    got = await attacker.commands.run("ls -A /opt 2>/dev/null | wc -l")
    assert got.stdout.strip() == "0"


def _status_with_token(host: SandboxHostProcess, sid: str, token: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", host.port, timeout=10)
    try:
        conn.putrequest("GET", "/files?path=/workspace/a.txt")
        conn.putheader("E2b-Sandbox-Id", sid)
        conn.putheader("X-Access-Token", token)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


async def test_non_ascii_access_token_is_401_not_500(
    sandboxhost: SandboxHostProcess, victim: AsyncSandbox
) -> None:
    await victim.files.write("/workspace/a.txt", "x")
    sid = victim.sandbox_id
    for token in (b"\xff\xfe", "tök".encode(), b"abc\x80"):
        assert _status_with_token(sandboxhost, sid, token) == 401
    good = victim._envd_access_token.encode()
    assert _status_with_token(sandboxhost, sid, good) == 200


def test_non_ascii_api_key_is_401_not_500(sandboxhost: SandboxHostProcess) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", sandboxhost.port, timeout=10)
    try:
        conn.putrequest("GET", "/v2/sandboxes")
        conn.putheader("X-API-KEY", b"e2b_\xff")
        conn.endheaders()
        assert conn.getresponse().status == 401
    finally:
        conn.close()
