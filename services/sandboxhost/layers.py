"""Copy-on-write sandbox filesystems: overlayfs over shared read-only layers.

A sandbox's files (``/workspace``, ``/home/user``, ``/tmp``) live in
``<sandbox dir>/fs``. Where this host may mount overlayfs (root), ``fs`` is an
overlay: the sandbox's own ``upper`` over a stack of immutable layers under
``<data dir>/layers/<id>`` (top first). A snapshot turns a sandbox's upper into
a new layer; a fork or a sandbox created from a snapshot gets an empty upper
over that stack, so nothing is copied for it. Without overlayfs (not root),
``fs`` is a plain directory and a snapshot is a full copy (said so in
``GET /admin/info``: ``"snapshots": "copy"``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import shutil
import subprocess
from pathlib import Path

from services.sandboxhost.errors import ControlError

log = logging.getLogger(__name__)
BASE = "base"  # the empty bottom layer (overlayfs wants at least one lower)
MNT_DETACH = 2
# The lowerdir option must fit a page: keep stacks well under that.
MAX_LAYERS = 24
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _mount_overlay(target: Path, lowers: list[Path], upper: Path, work: Path) -> None:
    opts = (
        f"lowerdir={':'.join(str(p) for p in lowers)},upperdir={upper},"
        f"workdir={work},redirect_dir=on"
    )
    rc = _libc.mount(b"overlay", str(target).encode(), b"overlay", 0, opts.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount overlay on {target}: {os.strerror(err)}")


def is_mounted(target: Path) -> bool:
    """True if ``target`` is a mount point (from /proc/self/mountinfo)."""
    want = str(target)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == want for line in f)


def unmount(target: Path) -> None:
    """Detach the overlay at ``target`` (lazy: an open descriptor cannot block)."""
    while is_mounted(target):
        if _libc.umount2(str(target).encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"umount {target}: {os.strerror(err)}")


def copy_tree(src: Path, dst: Path) -> None:
    """``cp -a`` (whiteouts and overlay xattrs kept; reflinks where supported)."""
    dst.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["cp", "-a", "--reflink=auto", f"{src}/.", str(dst)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise OSError(f"copy {src} → {dst}: {done.stderr.decode(errors='replace')}")


class LayerStore:
    """The immutable layers of a host and the mounts of its sandboxes."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "layers"
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / BASE).mkdir(exist_ok=True)
        self.overlay = self._probe()
        # Layers being made whose snapshot is not saved yet: never collected.
        self.pending: set[str] = set()

    @property
    def kind(self) -> str:
        """``overlay`` (copy-on-write) or ``copy`` (full copies)."""
        return "overlay" if self.overlay else "copy"

    def path(self, layer_id: str) -> Path:
        """Directory of a layer."""
        return self.root / layer_id

    def _probe(self) -> bool:
        """Can this host mount overlayfs? (root only; tried once at start)."""
        probe = self.root / ".probe"
        shutil.rmtree(probe, ignore_errors=True)
        for sub in ("upper", "work", "merged"):
            (probe / sub).mkdir(parents=True)
        try:
            _mount_overlay(
                probe / "merged", [self.path(BASE)], probe / "upper", probe / "work"
            )
        except OSError as exc:
            log.warning("overlayfs unavailable (%s): snapshots are full copies", exc)
            return False
        finally:
            with contextlib.suppress(OSError):
                unmount(probe / "merged")
            shutil.rmtree(probe, ignore_errors=True)
        return True

    def mount(
        self, sandbox_dir: Path, layers: list[str], upper_root: Path | None = None
    ) -> None:
        """Mount the sandbox's ``fs`` (its upper over ``layers``, top first).

        ``upper_root`` holds ``upper`` and ``work`` (the sandbox's quota disk,
        so the kernel limits what it writes); default: the sandbox dir.
        """
        fs = sandbox_dir / "fs"
        root = upper_root or sandbox_dir
        for sub in (root / "upper", root / "work", fs):
            sub.mkdir(exist_ok=True)
        unmount(fs)  # a stale mount from a host that died
        lowers = [self.path(x) for x in layers] + [self.path(BASE)]
        _mount_overlay(fs, lowers, root / "upper", root / "work")

    def add_copy(self, layer_id: str, src: Path) -> None:
        """A new layer holding a copy of ``src`` (a frozen sandbox's upper)."""
        tmp = self.root / f".{layer_id}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        copy_tree(src, tmp)
        os.replace(tmp, self.path(layer_id))

    def add_move(self, layer_id: str, src: Path) -> None:
        """A new layer made of ``src`` itself (an unmounted upper: O(1)); a copy
        when ``src`` is on another filesystem (the sandbox's quota disk)."""
        if src.stat().st_dev != self.root.stat().st_dev:
            self.add_copy(layer_id, src)
            shutil.rmtree(src)
        else:
            os.replace(src, self.path(layer_id))
        src.mkdir()

    def collect(self, used: set[str]) -> list[str]:
        """Delete every layer no sandbox or snapshot uses; return their ids."""
        gone = []
        for entry in self.root.iterdir():
            name = entry.name
            if name == BASE or name.startswith(".") or name in used | self.pending:
                continue
            shutil.rmtree(entry, ignore_errors=True)
            gone.append(name)
        return gone


def check_depth(layers: list[str]) -> None:
    """Refuse a stack overlayfs cannot mount."""
    if len(layers) > MAX_LAYERS:
        raise ControlError(
            409, f"snapshot chain too deep ({len(layers)} layers, max {MAX_LAYERS})"
        )
