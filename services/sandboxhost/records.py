"""Durable sandbox records: one JSON file per sandbox under the data dir."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import shutil
from pathlib import Path

import msgspec

log = logging.getLogger(__name__)


class SandboxRecord(msgspec.Struct, kw_only=True):
    """What the host remembers about a sandbox across its own restarts."""

    sandbox_id: str
    template_id: str = "base"
    alias: str = "base"
    envd_access_token: str
    # Agentbus extension (services/sandboxhost/tokens.py): None = never expires.
    envd_token_expires_at: float | None = None
    previous_envd_token: str | None = None
    previous_envd_token_until: float = 0.0
    state: str = "running"  # "running" | "paused"
    started_at: float
    end_at: float
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    env_vars: dict[str, str] = msgspec.field(default_factory=dict)
    cpu: float = 2.0
    memory_mb: int = 2048
    pids: int = 512
    disk_mb: int = 4096
    network: str = "internet"  # "internet" | "none" (services/sandboxhost/network.py)
    allow_out: list[str] = msgspec.field(default_factory=list)
    deny_out: list[str] = msgspec.field(default_factory=list)
    on_timeout: str = "kill"  # "kill" | "pause"
    auto_resume: bool = False
    pause_mode: str = "full"  # "full" (memory kept) | "filesystem"
    auto_pause_memory: bool = True  # on_timeout pause keeps memory (E2B default)
    # Copy-on-write files (layers.py): fs is an overlay of upper over layers.
    overlay: bool = False
    layers: list[str] = msgspec.field(default_factory=list)  # top first
    template_root: str = ""  # built template layer (templates.py), "" = host tools
    isolation: str = "bwrap"
    # Set when the host restarted under this sandbox: its processes are gone.
    processes_lost_at: float | None = None


def iso(ts: float) -> str:
    """RFC 3339 UTC timestamp."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def write_private(path: Path, data: bytes) -> None:
    """Write a file readable by its owner only (0600), whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)  # an older file may have been 0644
        f.write(data)


class RecordStore:
    """Reads and atomically writes records in ``<data dir>/sandboxes/<id>/``."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "sandboxes"
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(SandboxRecord)

    def dir_of(self, sandbox_id: str) -> Path:
        """The sandbox's own directory (record, fs, logs)."""
        return self.root / sandbox_id

    def save(self, record: SandboxRecord) -> None:
        """Write a record atomically."""
        d = self.dir_of(record.sandbox_id)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = d / "record.json.tmp"
        write_private(tmp, self._encoder.encode(record))  # holds the envd token
        os.replace(tmp, d / "record.json")

    def load_all(self) -> list[SandboxRecord]:
        """Every stored record (unreadable ones are logged and skipped)."""
        out = []
        for d in sorted(self.root.iterdir()):
            path = d / "record.json"
            if not path.exists():
                continue
            try:
                out.append(self._decoder.decode(path.read_bytes()))
            except msgspec.DecodeError as exc:
                log.error("skipping unreadable sandbox record %s: %s", path, exc)
        return out

    def delete(self, sandbox_id: str) -> None:
        """Remove a sandbox's record and files."""
        d = self.dir_of(sandbox_id)
        with contextlib.suppress(FileNotFoundError):
            (d / "record.json").unlink()
        shutil.rmtree(d, ignore_errors=True)
