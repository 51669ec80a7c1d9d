"""A kernel-enforced disk quota per sandbox: a loop-mounted ext4 image.

A sandbox's writable tree (``fs/``: its ``/workspace``, ``/home/user`` and
``/tmp``) is the root of its own ext4 filesystem of ``AGENTBUS_SANDBOX_DISK_MB``,
stored as a sparse file ``disk.img`` beside it and mounted (loop, ``nosuid``,
``nodev``) before the jail starts. A write past the size fails with ``ENOSPC``
inside the sandbox and costs the host nothing more; a sparse file inside costs
only what is written.

Creating one is a sparse copy (``cp --sparse=always --reflink=auto``) of an
empty image made once per size with ``mkfs.ext4`` (``disk-templates/`` in the
data dir), then a mount. Needs root, ``mkfs.ext4`` and loop devices; without
them the host says loudly that disks are not limited and goes on.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path

log = logging.getLogger(__name__)
IMAGE = "disk.img"
MKFS_OPTIONS = "lazy_itable_init=1,lazy_journal_init=1,nodiscard"
_template_lock = threading.Lock()


def unavailable_reason() -> str | None:
    """Why this host cannot enforce disk quotas (None: it can)."""
    if os.geteuid() != 0:
        return "not root (loop mounts need root)"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control"
    for tool in ("mkfs.ext4", "mount", "umount", "cp"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return None


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    if done.returncode != 0:
        err = (done.stderr or done.stdout).decode(errors="replace").strip()
        raise OSError(f"{argv[0]} failed: {err}")


def template(template_dir: Path, size_mb: int) -> Path:
    """The empty ext4 image of ``size_mb`` (made on first use)."""
    path = template_dir / f"ext4-{size_mb}.img"
    with _template_lock:
        if path.exists():
            return path
        template_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.truncate(size_mb * 1024 * 1024)
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", MKFS_OPTIONS, str(tmp)])
        os.replace(tmp, path)
        return path


def mount(
    sandbox_dir: Path, size_mb: int, template_dir: Path, target: str = "fs"
) -> bool:
    """Mount the sandbox's image on ``target`` (creating it); False if legacy.

    ``target`` is ``fs`` for a plain sandbox and ``disk`` for an overlay one
    (its upper and work dirs live on the image, so only what it changes counts).

    A sandbox created before quotas (files in ``fs/``, no image) keeps its plain
    directory.
    """
    fs = sandbox_dir / target
    image = sandbox_dir / IMAGE
    if os.path.ismount(fs):
        return True  # still mounted (the host restarted under it)
    if not image.exists():
        if fs.exists() and any(fs.iterdir()):
            log.warning("sandbox %s predates disk quotas: not limited", fs.parent.name)
            return False
        src = template(template_dir, size_mb)
        tmp = image.with_suffix(".tmp")
        _run(["cp", "--sparse=always", "--reflink=auto", str(src), str(tmp)])
        os.replace(tmp, image)
    fs.mkdir(mode=0o700, exist_ok=True)
    _run(["mount", "-o", "loop,nosuid,nodev,noatime", str(image), str(fs)])
    os.chmod(fs, 0o700)
    return True


def unmount(sandbox_dir: Path, target: str = "fs") -> None:
    """Unmount ``target`` if it is a mount (its loop device is freed with it)."""
    fs = sandbox_dir / target
    if os.path.ismount(fs):
        _run(["umount", str(fs)])


def usage_bytes(sandbox_dir: Path) -> int:
    """Host disk really used by the sandbox's image (sparse-aware)."""
    try:
        return (sandbox_dir / IMAGE).stat().st_blocks * 512
    except FileNotFoundError:
        return 0
