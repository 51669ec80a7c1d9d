"""Sandbox metrics (E2B ``get_metrics``): cpu, memory and disk samples over time.

Read from the sandbox's cgroups where it has them (v2 ``cpu.stat`` /
``memory.current`` / ``memory.stat``, or v1 ``memory.usage_in_bytes`` /
``memory.stat``); otherwise from ``/proc`` of every process of the sandbox.
Disk used is the size of the sandbox's own files (its overlay upper, or its
whole file tree without overlayfs). A sample is taken every ``INTERVAL``
seconds per running sandbox and on demand when the newest is older than that;
the last ``KEEP`` samples are kept in memory.
"""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path

import msgspec

from services.sandboxhost.cgroups import PARENT
from services.sandboxhost.records import iso
from services.sandboxhost.sandbox import LocalSandbox, descendants

INTERVAL = 5.0
KEEP = 720  # one hour at INTERVAL
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class Sample(msgspec.Struct, frozen=True):
    """One measurement of a sandbox."""

    ts: float
    cpu_count: int
    cpu_used_pct: float
    mem_used: int
    mem_total: int
    mem_cache: int
    disk_used: int
    disk_total: int

    def json(self) -> dict[str, object]:
        """E2B's ``SandboxMetric``."""
        return {
            "timestamp": iso(self.ts),
            "timestampUnix": int(self.ts),
            "cpuCount": self.cpu_count,
            "cpuUsedPct": round(self.cpu_used_pct, 2),
            "memUsed": self.mem_used,
            "memTotal": self.mem_total,
            "memCache": self.mem_cache,
            "diskUsed": self.disk_used,
            "diskTotal": self.disk_total,
        }


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _stat_field(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def cpu_seconds(sandbox: LocalSandbox) -> float:
    """CPU time used by every process of the sandbox so far."""
    cg = sandbox.cgroups
    if cg is not None and cg.layout.freeze_root and cg.v2_freeze:
        group = Path(cg.layout.freeze_root) / PARENT / sandbox.sandbox_id
        text = _read(group / "cpu.stat")
        usec = _stat_field(text, "usage_usec")
        if usec is not None:
            return usec / 1e6
    total = 0
    for pid in _pids(sandbox):
        text = _read(Path(f"/proc/{pid}/stat"))
        if text:
            fields = text.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / CLK_TCK


def memory(sandbox: LocalSandbox) -> tuple[int, int]:
    """(bytes used, page cache bytes) of the sandbox."""
    cg = sandbox.cgroups
    if cg is not None and cg.layout.memory_root:
        d = Path(cg.layout.memory_root) / PARENT / sandbox.sandbox_id
        v2 = cg.layout.kind == "v2"
        used = _read(d / ("memory.current" if v2 else "memory.usage_in_bytes"))
        stat = _read(d / "memory.stat")
        cache = _stat_field(stat, "file" if v2 else "cache") or 0
        if used is not None and used.strip().isdigit():
            return int(used), cache
    rss = 0
    for pid in _pids(sandbox):
        text = _read(Path(f"/proc/{pid}/statm"))
        if text:
            rss += int(text.split()[1]) * PAGE
    return rss, 0


def _pids(sandbox: LocalSandbox) -> list[int]:
    if sandbox.jail is None:
        return []
    return descendants(sandbox.jail.proc.pid)


def disk_used(sandbox: LocalSandbox) -> int:
    """Bytes of the sandbox's own files (allocated blocks)."""
    root = sandbox.upper_dir if sandbox.record.overlay else sandbox.dir / "fs"
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total


class Metrics:
    """Samples of every sandbox of a host."""

    def __init__(self) -> None:
        self.samples: dict[str, collections.deque[Sample]] = {}
        self._last_cpu: dict[str, tuple[float, float]] = {}

    def sample(self, sandbox: LocalSandbox) -> Sample:
        """Measure a sandbox now and keep the sample."""
        rec = sandbox.record
        now = time.time()
        used_s = cpu_seconds(sandbox)
        prev_ts, prev_s = self._last_cpu.get(rec.sandbox_id, (rec.started_at, 0.0))
        cpus = max(int(rec.cpu), 1)
        pct = 100.0 * max(used_s - prev_s, 0.0) / max(now - prev_ts, 1e-3) / cpus
        self._last_cpu[rec.sandbox_id] = (now, used_s)
        mem_used, mem_cache = memory(sandbox)
        sample = Sample(
            ts=now,
            cpu_count=cpus,
            cpu_used_pct=min(pct, 100.0),
            mem_used=mem_used,
            mem_total=rec.memory_mb * 1024 * 1024,
            mem_cache=mem_cache,
            disk_used=disk_used(sandbox),
            disk_total=rec.disk_mb * 1024 * 1024,
        )
        ring = self.samples.setdefault(rec.sandbox_id, collections.deque(maxlen=KEEP))
        ring.append(sample)
        return sample

    def due(self, sandbox: LocalSandbox, now: float) -> bool:
        """True if the sandbox's newest sample is older than ``INTERVAL``."""
        ring = self.samples.get(sandbox.sandbox_id)
        return not ring or now - ring[-1].ts >= INTERVAL

    def between(
        self, sandbox: LocalSandbox, start: float | None, end: float | None
    ) -> list[Sample]:
        """The kept samples in [start, end] (a fresh one first if due and running)."""
        if sandbox.record.state == "running" and self.due(sandbox, time.time()):
            self.sample(sandbox)
        lo = start if start is not None else sandbox.record.started_at - 1
        hi = end if end is not None else time.time() + 1
        return [s for s in self.samples.get(sandbox.sandbox_id, ()) if lo <= s.ts <= hi]

    def forget(self, sandbox_id: str) -> None:
        """Drop a killed sandbox's samples."""
        self.samples.pop(sandbox_id, None)
        self._last_cpu.pop(sandbox_id, None)
