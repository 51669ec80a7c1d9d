"""Control-plane operations on snapshots: create, list, delete, fork."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any

from services.sandboxhost.errors import ControlError
from services.sandboxhost.host import SandboxHost, new_sandbox_id
from services.sandboxhost.records import SandboxRecord
from services.sandboxhost.sandbox import LocalSandbox
from services.sandboxhost.snapshots import (
    SnapshotRecord,
    capture,
    new_snapshot,
)

log = logging.getLogger(__name__)


class Snapshots:
    """Snapshots and forks of one host's sandboxes."""

    def __init__(self, host: SandboxHost) -> None:
        self.host = host

    async def create(self, sandbox_id: str, name: str | None) -> SnapshotRecord:
        """Snapshot a sandbox's files (running: frozen while copied)."""
        sandbox = self.host.get(sandbox_id)
        if name is not None and self.host.snapshots.find(name) is not None:
            raise ControlError(409, f"a snapshot named {name!r} already exists")
        snap = await self._take(sandbox, name, listed=True)
        log.info("snapshot %s of sandbox %s", snap.snapshot_id, sandbox_id)
        return snap

    async def _take(
        self, sandbox: LocalSandbox, name: str | None, listed: bool
    ) -> SnapshotRecord:
        snapshot_id = new_sandbox_id()
        self.host.layers.pending.add(snapshot_id)
        try:
            async with sandbox.lock:
                try:
                    layers = await capture(self.host.layers, sandbox, snapshot_id)
                except OSError as exc:
                    raise ControlError(500, f"snapshot failed: {exc}") from exc
                self.host.store.save(sandbox.record)
            snap = new_snapshot(sandbox, snapshot_id, layers, name, listed)
            self.host.snapshots.save(snap)
        finally:
            self.host.layers.pending.discard(snapshot_id)
        return snap

    def listed(self, sandbox_id: str | None, name: str | None) -> list[SnapshotRecord]:
        """Listed snapshots, oldest first, optionally of one sandbox / name."""
        found = [
            s
            for s in self.host.snapshots.items.values()
            if s.listed
            and (not sandbox_id or s.sandbox_id == sandbox_id)
            and (not name or name in s.names)
        ]
        return sorted(found, key=lambda s: (s.created_at, s.snapshot_id))

    async def delete(self, ref: str) -> bool:
        """Delete a snapshot (its layers go when nothing else uses them)."""
        snap = self.host.snapshots.find(ref)
        if snap is None or not self.host.snapshots.delete(snap.snapshot_id):
            return False
        await self.collect()
        return True

    async def collect(self) -> None:
        """Delete the layers no sandbox and no snapshot uses any more."""
        used = self.host.snapshots.used_layers()
        for sandbox in self.host.sandboxes.values():
            used.update(sandbox.record.layers)
        await asyncio.to_thread(self.host.layers.collect, used)

    async def fork(
        self,
        sandbox_id: str,
        count: int,
        timeout: Any | None,  # noqa: ASYNC109 - E2B field
    ) -> list[dict[str, Any]]:
        """``count`` new sandboxes from the sandbox's files now (E2B fork results)."""
        source = self.host.get(sandbox_id)
        snap = await self._take(source, None, listed=False)
        results: list[dict[str, Any]] = []
        for _ in range(count):
            record = self._child(source.record, snap, timeout)
            try:
                child = await self.host.start(record)
            except ControlError as exc:
                results.append({"error": {"code": exc.status, "message": exc.message}})
                continue
            results.append({"sandbox": self.host.sandbox_json(child)})
        # The fork's private snapshot is only a name for its layers.
        self.host.snapshots.delete(snap.snapshot_id)
        await self.collect()
        return results

    def _child(
        self, parent: SandboxRecord, snap: SnapshotRecord, timeout: Any | None
    ) -> SandboxRecord:
        now = time.time()
        remaining = max(int(parent.end_at - now), 1)
        seconds = self.host.timeout_of(timeout if timeout is not None else remaining)
        return SandboxRecord(
            sandbox_id=new_sandbox_id(),
            template_id=parent.template_id,
            alias=parent.alias,
            envd_access_token=secrets.token_hex(32),
            started_at=now,
            end_at=now + seconds,
            metadata=dict(parent.metadata),
            env_vars=dict(parent.env_vars),
            cpu=parent.cpu,
            memory_mb=parent.memory_mb,
            pids=parent.pids,
            disk_mb=parent.disk_mb,
            network=parent.network,
            on_timeout=parent.on_timeout,
            auto_resume=parent.auto_resume,
            auto_pause_memory=parent.auto_pause_memory,
            isolation=parent.isolation,
            overlay=parent.overlay,
            layers=list(snap.layers),
            template_root=parent.template_root,
        )
