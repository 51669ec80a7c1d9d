"""One sandbox at run time: its jail, supervisor link, processes and watchers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.sandboxhost import quota, templates
from services.sandboxhost.cgroups import CgroupLayout, Limits, SandboxCgroups
from services.sandboxhost.errors import EnvdRpcError, JailError
from services.sandboxhost.jail import Jail, JailSpec, sandbox_env
from services.sandboxhost.layers import LayerStore, unmount
from services.sandboxhost.link import SupervisorLink
from services.sandboxhost.network import NetworkSpec
from services.sandboxhost.processes import ProcessTable
from services.sandboxhost.records import HostSandboxRecord

log = logging.getLogger(__name__)
BOOT_TIMEOUT = 15.0


def descendants(root: int) -> list[int]:
    """Pids of every descendant of ``root`` (from /proc; for the signal fallback)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def network_of(record: HostSandboxRecord) -> NetworkSpec:
    """The record's network (records from before per-sandbox namespaces: host)."""
    mode = "none" if record.network == "none" else "internet"
    return NetworkSpec(mode=mode, allow_out=record.allow_out, deny_out=record.deny_out)


class LocalSandbox:
    """A sandbox's live parts; the record is the durable part."""

    def __init__(
        self,
        record: HostSandboxRecord,
        sandbox_dir: Path,
        spec: JailSpec,
        layout: CgroupLayout,
        save: Callable[[HostSandboxRecord], None] | None = None,
        layers: LayerStore | None = None,
    ) -> None:
        self.record = record
        self.layer_store = layers
        self._save = save
        self._watchdog: asyncio.Task[None] | None = None
        self.dir = sandbox_dir
        self.spec = spec
        self.layout = layout
        self.jail: Jail | None = None
        self.link: SupervisorLink | None = None
        self.procs: ProcessTable | None = None
        self.cgroups: SandboxCgroups | None = None
        self.watchers: dict[str, Any] = {}
        self.lock = asyncio.Lock()
        self.frozen = False

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id."""
        return self.record.sandbox_id

    def base_env(self) -> dict[str, str]:
        """Environment of every process: the sandbox's own, nothing of the host's."""
        env = sandbox_env(self.spec, self.dir / "fs" / "home")
        root = self.record.template_root
        if root:
            inside = templates.MOUNT if self.spec.isolation == "bwrap" else root
            env.update(templates.env_of(Path(root), inside, env["PATH"]))
        env.update(self.record.env_vars)
        return env

    async def boot(self) -> None:
        """Start the jail and wait for its supervisor to answer."""
        if self.layout.kind != "none":
            self.cgroups = SandboxCgroups(self.layout, self.sandbox_id)
            limits = Limits(self.record.cpu, self.record.memory_mb, self.record.pids)
            await asyncio.to_thread(self.cgroups.create, limits)
        if self.record.overlay and self.layer_store is not None:
            store = self.layer_store
            await asyncio.to_thread(self.mount_disk)
            upper_root = self.dir / "disk" if self.overlay_disk else None
            await asyncio.to_thread(
                store.mount, self.dir, self.record.layers, upper_root
            )
        rlimits = None
        if self.cgroups is None:
            log.warning("sandbox %s: no cgroups here, using rlimits", self.sandbox_id)
            rlimits = {"as": self.record.memory_mb * 1024 * 1024}
            if self.spec.uid is not None:  # only a dedicated uid may be capped
                rlimits["nproc"] = self.record.pids
        root = self.record.template_root
        binds = templates.binds(root) if root else ()
        self.jail = await Jail.start(
            self.spec,
            self.dir,
            network_of(self.record),
            self.cgroups,
            rlimits,
            0 if self.record.overlay else self.record.disk_mb,
            binds,
        )
        self.procs = ProcessTable()
        self.link = SupervisorLink(self.jail.sock, self.procs.on_exit)
        try:
            async with asyncio.timeout(BOOT_TIMEOUT):
                await self.link.call("ping")
                await self.jail.connect_network(network_of(self.record))
        except (TimeoutError, EnvdRpcError, OSError) as exc:
            await self.stop()
            log_tail = (self.dir / "supervisor.log").read_text(errors="replace")[-2000:]
            raise JailError(
                self.sandbox_id, f"did not start ({exc!r}): {log_tail}"
            ) from exc
        self.frozen = False
        self._watchdog = asyncio.get_running_loop().create_task(
            self._revive_when_lost(self.link)
        )

    async def _revive_when_lost(self, link: SupervisorLink) -> None:
        """Code in the sandbox may kill its supervisor (``kill -9 -1``): restart.

        Every process of the sandbox is gone with it; files stay. The record
        says so (``processes_lost_at``), as after a host restart.
        """
        await link.closed.wait()
        if self.link is not link or self.record.state != "running":
            return
        log.warning("sandbox %s: supervisor died; restarting it", self.sandbox_id)
        async with self.lock:
            if self.link is not link:
                return
            # Recorded before the new supervisor answers anyone: a client that
            # sees the revived sandbox must also see that its processes were lost.
            self.record.processes_lost_at = time.time()
            if self._save is not None:
                self._save(self.record)
            await self.stop()
            try:
                await self.boot()
            except JailError as exc:
                log.error("sandbox %s could not be revived: %s", self.sandbox_id, exc)

    def require_live(self) -> tuple[SupervisorLink, ProcessTable]:
        """The link and process table, or the error a stopped sandbox answers."""
        if self.record.state != "running" or self.link is None or self.procs is None:
            raise EnvdRpcError(
                "unavailable",
                f"The sandbox {self.sandbox_id} was not found (not running)",
            )
        return self.link, self.procs

    async def freeze(self, frozen: bool) -> None:
        """Freeze (pause) or thaw (resume) every process of the sandbox."""
        if self.jail is None or self.frozen == frozen:
            self.frozen = frozen
            return
        done = False
        if self.cgroups is not None:
            done = await asyncio.to_thread(self.cgroups.freeze, frozen)
        if not done:
            await asyncio.to_thread(self._signal_freeze, frozen)
        self.frozen = frozen

    def _signal_freeze(self, frozen: bool) -> None:
        """Fallback without a cgroup freezer: SIGSTOP/SIGCONT the whole tree."""
        assert self.jail is not None
        sig = signal.SIGSTOP if frozen else signal.SIGCONT
        seen: set[int] = set()
        # Repeat until no new process appears (one may fork while we stop others).
        while True:
            pids = [p for p in descendants(self.jail.proc.pid) if p not in seen]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                seen.add(pid)

    @property
    def overlay_disk(self) -> bool:
        """Does the quota disk hold this overlay sandbox's upper (not ``fs``)?"""
        return (
            self.record.overlay
            and bool(self.spec.disk_templates)
            and self.record.disk_mb > 0
        )

    @property
    def upper_dir(self) -> Path:
        """Where the overlay's upper (what the sandbox changed) lives."""
        return (self.dir / "disk" if self.overlay_disk else self.dir) / "upper"

    def mount_disk(self) -> None:
        """Mount the quota disk of an overlay sandbox (idempotent)."""
        if self.overlay_disk:
            templates_dir = Path(self.spec.disk_templates or "")
            quota.mount(self.dir, self.record.disk_mb, templates_dir, "disk")

    def _release_files(self) -> None:
        """Unmount the overlay, then the quota disk under it (jail is gone)."""
        if self.record.overlay:
            unmount(self.dir / "fs")
        if self.spec.disk_templates:
            self._unmount()

    def unmount_disk(self) -> None:
        """Unmount the quota disk of a stopped overlay sandbox."""
        self._unmount()

    def _unmount(self) -> None:
        """Release the disk image (files stay in it); only after the jail died."""
        try:
            quota.unmount(self.dir, "disk" if self.overlay_disk else "fs")
        except OSError as exc:
            log.error("sandbox %s: %s", self.sandbox_id, exc)

    async def stop(self) -> None:
        """Kill every process of the sandbox and release its resources."""
        for watcher in list(self.watchers.values()):
            watcher.close()
        self.watchers.clear()
        if self.procs is not None:
            self.procs.close_all()
        link, self.link = self.link, None
        if link is not None:
            link.close()
        if self.cgroups is not None:
            await asyncio.to_thread(self.cgroups.kill)
            if self.frozen:
                await asyncio.to_thread(self.cgroups.freeze, False)
        if self.jail is not None:
            if self.frozen and self.cgroups is None:
                await asyncio.to_thread(self._signal_freeze, False)
            await self.jail.stop()
        if self.cgroups is not None:
            await asyncio.to_thread(self.cgroups.remove)
        await asyncio.to_thread(self._release_files)
        self.jail = self.link = self.procs = self.cgroups = None
        self.frozen = False
