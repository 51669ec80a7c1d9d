"""Disk: each sandbox writes into its own ext4 image of AGENTBUS_SANDBOX_DISK_MB."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from e2b import AsyncSandbox

from services.sandboxhost import quota
from tests.plugins.sandboxhost import SandboxHostProcess
from tests.support.sandboxhost import opts

DISK_MB = 64


@pytest.fixture(scope="module")
def small_disks(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SandboxHostProcess]:
    """A private host whose sandboxes get 64 MB disks."""
    if quota.unavailable_reason() is not None:
        pytest.skip(f"no disk quotas here: {quota.unavailable_reason()}")
    env = dict(os.environ, AGENTBUS_SANDBOX_DISK_MB=str(DISK_MB))
    host = SandboxHostProcess(tmp_path_factory.mktemp("disk") / "data", env=env)
    host.start()
    yield host
    host.stop()


@pytest.fixture
async def sbx(small_disks: SandboxHostProcess) -> AsyncIterator[AsyncSandbox]:
    sandbox = await AsyncSandbox.create(timeout=120, **opts(small_disks))
    yield sandbox
    await sandbox.kill()


def _mounted(path: Path) -> bool:
    return f" {path} " in Path("/proc/self/mounts").read_text()


async def test_real_fill_ends_in_enospc_inside_the_sandbox(
    small_disks: SandboxHostProcess, sbx: AsyncSandbox
) -> None:
    got = await sbx.commands.run(
        "dd if=/dev/zero of=/workspace/fill bs=1M count=200 2>&1; echo rc=$?; "
        "df -m --output=size /workspace | tail -1",
        timeout=60,
    )
    assert "No space left on device" in got.stdout
    assert "rc=1" in got.stdout
    size_mb = int(got.stdout.split()[-1])
    assert DISK_MB - 16 <= size_mb <= DISK_MB
    # /tmp and the home directory share the same quota.
    tmp = await sbx.commands.run(
        "dd if=/dev/zero of=/tmp/more bs=1M count=8 2>&1; true"
    )
    assert "No space left" in tmp.stdout
    image = small_disks.data_dir / "sandboxes" / sbx.sandbox_id / quota.IMAGE
    assert image.stat().st_blocks * 512 <= (DISK_MB + 8) * 1024 * 1024


async def test_sparse_fill_costs_the_host_nothing_and_fallocate_is_refused(
    small_disks: SandboxHostProcess, sbx: AsyncSandbox
) -> None:
    image = small_disks.data_dir / "sandboxes" / sbx.sandbox_id / quota.IMAGE
    before = image.stat().st_blocks
    got = await sbx.commands.run(
        "truncate -s 2G /workspace/sparse && ls -s --block-size=1 /workspace/sparse; "
        "fallocate -l 2G /workspace/solid 2>&1; echo rc=$?"
    )
    assert got.stdout.startswith("0 ")  # 2 GB apparent, 0 bytes on disk
    assert "No space left on device" in got.stdout
    assert image.stat().st_blocks - before < 4 * 1024 * 1024 // 512


async def test_the_image_is_unmounted_and_deleted_with_its_sandbox(
    small_disks: SandboxHostProcess,
) -> None:
    sandbox = await AsyncSandbox.create(timeout=60, **opts(small_disks))
    d = small_disks.data_dir / "sandboxes" / sandbox.sandbox_id
    assert _mounted(d / "fs")
    await sandbox.files.write("/workspace/keep.txt", "kept")
    await sandbox.pause()  # processes kept: still mounted
    resumed = await AsyncSandbox.connect(sandbox.sandbox_id, **opts(small_disks))
    assert await resumed.files.read("/workspace/keep.txt") == "kept"
    await resumed.kill()
    assert not _mounted(d / "fs")
    assert not d.exists()


async def test_a_host_restarted_after_a_crash_reuses_the_mounted_disk(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if quota.unavailable_reason() is not None:
        pytest.skip(f"no disk quotas here: {quota.unavailable_reason()}")
    env = dict(os.environ, AGENTBUS_SANDBOX_DISK_MB=str(DISK_MB))
    host = SandboxHostProcess(tmp_path_factory.mktemp("crash") / "data", env=env)
    host.start()
    try:
        sandbox = await AsyncSandbox.create(timeout=60, **opts(host))
        fs = host.data_dir / "sandboxes" / sandbox.sandbox_id / "fs"
        await sandbox.files.write("/workspace/kept.txt", "kept")
        host.kill()  # SIGKILL: no clean-up code runs; the mount stays
        assert _mounted(fs)
        host.start()  # reuses it (never a second mount of the same image)
        back = await AsyncSandbox.connect(sandbox.sandbox_id, **opts(host))
        assert await back.files.read("/workspace/kept.txt") == "kept"
        assert Path("/proc/self/mounts").read_text().count(f" {fs} ") == 1
        await back.kill()
        assert not _mounted(fs)
    finally:
        host.stop()
