"""Snapshots and forks of sandboxes (filesystem state; see layers.py).

A snapshot is an immutable stack of layers plus what a sandbox needs to start
from it (template, environment). ``POST /sandboxes/{id}/snapshots`` takes one;
``Sandbox.create(template=<snapshot id or name>)`` starts from one; a fork is an
unlisted snapshot and ``count`` sandboxes started from it. Memory is never
part of a snapshot here (no checkpointing): processes start afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import msgspec

from services.sandboxhost.errors import ControlError
from services.sandboxhost.layers import LayerStore, check_depth
from services.sandboxhost.sandbox import LocalSandbox


class SnapshotRecord(msgspec.Struct, kw_only=True):
    """A stored snapshot."""

    snapshot_id: str
    names: list[str] = msgspec.field(default_factory=list)
    sandbox_id: str
    template_id: str
    layers: list[str]  # top first
    env_vars: dict[str, str] = msgspec.field(default_factory=dict)
    template_root: str = ""
    created_at: float
    listed: bool = True  # False: a fork's private snapshot


class SnapshotStore:
    """One JSON file per snapshot in ``<data dir>/snapshots/``."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "snapshots"
        self.root.mkdir(parents=True, exist_ok=True)
        self._decoder = msgspec.json.Decoder(SnapshotRecord)
        self.items: dict[str, SnapshotRecord] = {}
        for path in sorted(self.root.glob("*.json")):
            with contextlib.suppress(msgspec.DecodeError):
                snap = self._decoder.decode(path.read_bytes())
                self.items[snap.snapshot_id] = snap

    def save(self, snap: SnapshotRecord) -> None:
        """Write atomically and remember."""
        tmp = self.root / f"{snap.snapshot_id}.json.tmp"
        tmp.write_bytes(msgspec.json.encode(snap))
        os.replace(tmp, self.root / f"{snap.snapshot_id}.json")
        self.items[snap.snapshot_id] = snap

    def delete(self, snapshot_id: str) -> bool:
        """Forget a snapshot; False if unknown."""
        if self.items.pop(snapshot_id, None) is None:
            return False
        with contextlib.suppress(FileNotFoundError):
            (self.root / f"{snapshot_id}.json").unlink()
        return True

    def find(self, ref: str) -> SnapshotRecord | None:
        """A listed snapshot by id or by one of its names."""
        snap = self.items.get(ref)
        if snap is not None:
            return snap
        for snap in self.items.values():
            if snap.listed and ref in snap.names:
                return snap
        return None

    def used_layers(self) -> set[str]:
        """Every layer a snapshot needs."""
        return {x for snap in self.items.values() for x in snap.layers}


async def _capture_stopped(
    store: LayerStore, sandbox: LocalSandbox, layer_id: str
) -> list[str]:
    """A stopped sandbox's upper becomes the layer (its quota disk mounted for it)."""
    rec = sandbox.record
    await asyncio.to_thread(sandbox.mount_disk)
    try:
        upper = sandbox.upper_dir
        upper.mkdir(exist_ok=True)
        if not any(upper.iterdir()):
            return list(rec.layers)
        check_depth([layer_id, *rec.layers])
        await asyncio.to_thread(store.add_move, layer_id, upper)
        rec.layers = [layer_id, *rec.layers]
        return list(rec.layers)
    finally:
        if sandbox.overlay_disk:
            await asyncio.to_thread(sandbox.unmount_disk)


async def capture(store: LayerStore, sandbox: LocalSandbox, layer_id: str) -> list[str]:
    """The layer stack of the sandbox's files now (its lock is held by the caller).

    Overlay: a running sandbox is frozen while its upper (only what it changed)
    is copied into a new layer; a stopped one's upper becomes the layer itself.
    Without overlay: a full copy of its files.
    """
    rec = sandbox.record
    if not rec.overlay:
        await asyncio.to_thread(store.add_copy, layer_id, sandbox.dir / "fs")
        return [layer_id]
    if sandbox.jail is None:
        return await _capture_stopped(store, sandbox, layer_id)
    upper = sandbox.upper_dir
    if not any(upper.iterdir()):
        return list(rec.layers)
    check_depth([layer_id, *rec.layers])
    was_frozen = sandbox.frozen
    await sandbox.freeze(True)
    try:
        await asyncio.to_thread(store.add_copy, layer_id, upper)
    finally:
        if not was_frozen:
            await sandbox.freeze(False)
    return [layer_id, *rec.layers]


def new_snapshot(
    sandbox: LocalSandbox,
    snapshot_id: str,
    layers: list[str],
    name: str | None,
    listed: bool = True,
) -> SnapshotRecord:
    """The record of a snapshot of ``sandbox``."""
    rec = sandbox.record
    return SnapshotRecord(
        snapshot_id=snapshot_id,
        names=[name] if name else [],
        sandbox_id=rec.sandbox_id,
        template_id=rec.template_id,
        layers=layers,
        env_vars=dict(rec.env_vars),
        template_root=rec.template_root,
        created_at=time.time(),
        listed=listed,
    )


def parse_count(value: object) -> int:
    """A fork's ``count`` (1 by default)."""
    if value is None:
        return 1
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 20:
        raise ControlError(400, f"count: expected an integer 1..20, got {value!r}")
    return value


def snapshot_json(snap: SnapshotRecord) -> dict[str, object]:
    """E2B's ``SnapshotInfo``."""
    return {"snapshotID": snap.snapshot_id, "names": snap.names}


def check_name(name: object) -> str | None:
    """A snapshot name: optional, a short printable string."""
    if name is None:
        return None
    if not isinstance(name, str) or not name or len(name) > 128:
        raise ControlError(400, "name: expected a string of 1..128 characters")
    if not name.isprintable():
        raise ControlError(400, "name: must be printable")
    return name
