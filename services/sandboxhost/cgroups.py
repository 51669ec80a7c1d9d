"""Per-sandbox cgroups: freeze/thaw, kill, CPU/memory/pid limits.

Detects what this machine offers: a pure cgroup v2 tree, a hybrid layout (v2
mounted at ``/sys/fs/cgroup/unified`` for freeze/kill, v1 controllers for the
limits), or nothing writable (the caller then falls back to SIGSTOP/SIGCONT and
rlimits).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

import msgspec

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
PARENT = "agentbus-sandboxhost"


class Limits(msgspec.Struct, frozen=True):
    """Resource limits of one sandbox."""

    cpu: float
    memory_mb: int
    pids: int


class CgroupLayout(msgspec.Struct, frozen=True):
    """Where freeze/kill and each limit live on this machine."""

    kind: str  # "v2" | "hybrid" | "v1" | "none"
    freeze_root: str = ""  # v2 dir (cgroup.freeze) or v1 freezer dir
    memory_root: str = ""
    pids_root: str = ""
    cpu_root: str = ""


def _writable(path: Path) -> bool:
    probe = path / f"{PARENT}-probe-{os.getpid()}"
    try:
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError:
        return False
    return True


def detect_layout() -> CgroupLayout:
    """Find the cgroup hierarchies this process may create groups in."""
    if (ROOT / "cgroup.controllers").exists() and _writable(ROOT):
        controllers = (ROOT / "cgroup.controllers").read_text().split()
        with contextlib.suppress(OSError):
            wanted = [c for c in ("cpu", "memory", "pids") if c in controllers]
            (ROOT / "cgroup.subtree_control").write_text(
                " ".join("+" + c for c in wanted)
            )
        v2 = str(ROOT)
        return CgroupLayout("v2", v2, v2, v2, v2)
    v1 = {c: str(ROOT / c) for c in ("memory", "pids", "cpu", "freezer")}
    v1 = {c: p for c, p in v1.items() if _writable(Path(p))}
    unified = ROOT / "unified"
    if (unified / "cgroup.procs").exists() and _writable(unified):
        return CgroupLayout(
            "hybrid",
            str(unified),
            v1.get("memory", ""),
            v1.get("pids", ""),
            v1.get("cpu", ""),
        )
    if "freezer" in v1:
        return CgroupLayout(
            "v1",
            v1["freezer"],
            v1.get("memory", ""),
            v1.get("pids", ""),
            v1.get("cpu", ""),
        )
    return CgroupLayout("none")


class SandboxCgroups:
    """The cgroups of one sandbox (one directory per hierarchy in use)."""

    def __init__(self, layout: CgroupLayout, name: str) -> None:
        self.layout = layout
        self.name = name
        roots = {
            layout.freeze_root,
            layout.memory_root,
            layout.pids_root,
            layout.cpu_root,
        }
        self.dirs = [Path(r) / PARENT / name for r in sorted(roots) if r]
        self.v2_freeze = layout.kind in ("v2", "hybrid")

    @property
    def freeze_dir(self) -> Path | None:
        """The group whose freezer covers every process of the sandbox."""
        if not self.layout.freeze_root:
            return None
        return Path(self.layout.freeze_root) / PARENT / self.name

    def create(self, limits: Limits) -> None:
        """Make the groups and write the limits.

        Groups left by a crashed host are reused: whatever still runs in them
        is killed and a freeze from before the crash is lifted.
        """
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)
        if self.pids():
            self.kill()
        fdir = self.freeze_dir
        if fdir is not None and self.v2_freeze:
            (fdir / "cgroup.freeze").write_text("0")
        elif fdir is not None:
            (fdir / "freezer.state").write_text("THAWED")
        self._write_limits(limits)

    def _write_limits(self, limits: Limits) -> None:
        mem = limits.memory_mb * 1024 * 1024
        quota = int(limits.cpu * 100_000)
        if self.layout.kind == "v2":
            self._set(self.layout.memory_root, "memory.max", str(mem))
            self._set(self.layout.pids_root, "pids.max", str(limits.pids))
            self._set(self.layout.cpu_root, "cpu.max", f"{quota} 100000")
            return
        self._set(self.layout.memory_root, "memory.limit_in_bytes", str(mem))
        self._set(self.layout.pids_root, "pids.max", str(limits.pids))
        self._set(self.layout.cpu_root, "cpu.cfs_period_us", "100000")
        self._set(self.layout.cpu_root, "cpu.cfs_quota_us", str(quota))

    def _set(self, root: str, name: str, value: str) -> None:
        if not root:
            return
        try:
            (Path(root) / PARENT / self.name / name).write_text(value)
        except OSError as exc:
            log.warning("cgroup %s: cannot set %s=%s: %s", self.name, name, value, exc)

    def procs_files(self) -> list[int]:
        """Open write descriptors of every ``cgroup.procs`` (for a child to join)."""
        return [os.open(d / "cgroup.procs", os.O_WRONLY) for d in self.dirs]

    def pids(self) -> list[int]:
        """Pids of every process in the sandbox's group."""
        fdir = self.freeze_dir
        if fdir is None:
            return []
        try:
            text = (fdir / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def freeze(self, frozen: bool, timeout: float = 5.0) -> bool:
        """Freeze (or thaw) every process; True once the kernel confirms it."""
        fdir = self.freeze_dir
        if fdir is None:
            return False
        if self.v2_freeze:
            (fdir / "cgroup.freeze").write_text("1" if frozen else "0")
            want, probe = f"frozen {int(frozen)}", fdir / "cgroup.events"
        else:
            (fdir / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
            want, probe = "FROZEN" if frozen else "THAWED", fdir / "freezer.state"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if want in probe.read_text():
                return True
            time.sleep(0.002)
        return False

    def kill(self) -> bool:
        """SIGKILL every process in the group (cgroup.kill where available)."""
        fdir = self.freeze_dir
        if fdir is not None and self.v2_freeze and (fdir / "cgroup.kill").exists():
            (fdir / "cgroup.kill").write_text("1")
            return True
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        return fdir is not None

    def remove(self) -> None:
        """Remove the groups once empty (retrying briefly while processes exit)."""
        deadline = time.monotonic() + 2.0
        for d in self.dirs:
            while d.exists():
                try:
                    d.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        log.warning("cgroup %s not removed (still busy)", d)
                        break
                    time.sleep(0.01)
