"""The sandbox registry and lifecycle: create, connect/resume, pause, kill, timeouts."""

from __future__ import annotations

import asyncio
import logging
import secrets
import string
import time
from pathlib import Path
from typing import Any

from services.sandboxhost import network
from services.sandboxhost.cgroups import CgroupLayout
from services.sandboxhost.errors import ControlError, JailError
from services.sandboxhost.faults import Faults
from services.sandboxhost.jail import JailSpec
from services.sandboxhost.layers import LayerStore
from services.sandboxhost.metrics import Metrics
from services.sandboxhost.records import FileRecordStore, HostSandboxRecord, iso
from services.sandboxhost.sandbox import LocalSandbox
from services.sandboxhost.settings import SandboxHostSettings
from services.sandboxhost.snapshots import SnapshotStore
from services.sandboxhost.templates import Templates
from services.sandboxhost.tokens import TokenRequest, issue

log = logging.getLogger(__name__)
ENVD_VERSION = "0.6.4"
CLIENT_ID = "agentbus-local"
ID_ALPHABET = string.ascii_lowercase + string.digits


def new_sandbox_id() -> str:
    """A 20-character lowercase id like E2B's (no ``-``: hosts split on it)."""
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(20))


class SandboxHost:
    """Every sandbox of this host, their records and their clocks."""

    def __init__(
        self,
        settings: SandboxHostSettings,
        data_dir: Path,
        spec: JailSpec,
        layout: CgroupLayout,
    ) -> None:
        self.settings = settings
        self.store = FileRecordStore(data_dir)
        self.spec = spec
        self.layout = layout
        self.faults = Faults()
        self.layers = LayerStore(data_dir)
        self.snapshots = SnapshotStore(data_dir)
        self.metrics = Metrics()
        self.templates = Templates(data_dir, spec.python, settings)
        self.sandboxes: dict[str, LocalSandbox] = {}
        self._idempotency: dict[str, str] = {}
        # Sandboxes whose restore (boot after a host restart) is not over yet.
        self.restoring: dict[str, asyncio.Event] = {}
        # Restore boots wait on it (a test hook holds it: settings/faults).
        self.restore_gate = asyncio.Event()
        if not settings.sandboxhost_restore_hold:
            self.restore_gate.set()

    # --- start / stop of the host ---------------------------------------------
    # Restoring after a restart lives in restore.py (the host listens first).
    async def close(self) -> None:
        """Stop every sandbox's processes (records and files stay), and builds."""
        await self.templates.close()
        for sandbox in list(self.sandboxes.values()):
            await sandbox.stop()

    def _wrap(self, record: HostSandboxRecord) -> LocalSandbox:
        return LocalSandbox(
            record,
            self.store.dir_of(record.sandbox_id),
            self.spec,
            self.layout,
            self.store.save,
            self.layers,
        )

    # --- control-plane operations ---------------------------------------------
    def get(self, sandbox_id: str) -> LocalSandbox:
        """A known sandbox, or 404."""
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is None:
            raise ControlError(404, f"sandbox {sandbox_id} not found")
        return sandbox

    async def create(
        self,
        body: dict[str, Any],
        idempotency_key: str | None,
        tokens: TokenRequest | None = None,
    ) -> LocalSandbox:
        """Create and boot a sandbox (idempotent on ``Idempotency-Key``)."""
        if idempotency_key and idempotency_key in self._idempotency:
            existing = self.sandboxes.get(self._idempotency[idempotency_key])
            if existing is not None:
                return existing
        await self.faults.delay("create")
        record = self._new_record(body)
        template = str(body.get("templateID") or "base")
        if template != "base" and self.snapshots.find(template) is None:
            record.template_root = str(await self.templates.layer(template))
        sandbox = await self.start(record, idempotency_key)
        if tokens is not None and tokens.ttl_s:
            # Counted from the answer: a slow boot (or a template build) must
            # not eat the caller's token lifetime.
            record.envd_token_expires_at = time.time() + tokens.ttl_s
            self.store.save(record)
        return sandbox

    async def start(
        self, record: HostSandboxRecord, idempotency_key: str | None = None
    ) -> LocalSandbox:
        """Boot a new sandbox of ``record`` (its files from its layers)."""
        sandbox = self._wrap(record)
        self.store.save(record)
        try:
            if not record.overlay and record.layers:  # no overlayfs: a full copy
                src = self.layers.path(record.layers[0])
                await asyncio.to_thread(_copy_files, src, sandbox.dir / "fs")
                record.layers = []
            await sandbox.boot()
        except (JailError, OSError) as exc:
            await sandbox.stop()
            self.store.delete(record.sandbox_id)
            raise ControlError(500, str(exc)) from exc
        self.sandboxes[record.sandbox_id] = sandbox
        if idempotency_key:
            self._idempotency[idempotency_key] = record.sandbox_id
        log.info("sandbox %s created (%s)", record.sandbox_id, record.isolation)
        return sandbox

    def _new_record(self, body: dict[str, Any]) -> HostSandboxRecord:
        s = self.settings
        timeout = self.timeout_of(body.get("timeout", s.sandboxhost_default_timeout))
        try:
            net = network.from_request(body, s.sandboxhost_network)
        except network.NetworkError as exc:
            raise ControlError(400, str(exc)) from exc
        auto_resume = body.get("autoResume") or {}
        now = time.time()
        template = str(body.get("templateID") or "base")
        snap = self.snapshots.find(template)
        env_vars = dict(snap.env_vars) if snap is not None else {}
        env_vars.update(
            {str(k): str(v) for k, v in (body.get("envVars") or {}).items()}
        )
        return HostSandboxRecord(
            sandbox_id=new_sandbox_id(),
            template_id=snap.snapshot_id if snap is not None else template,
            alias=template,
            overlay=self.layers.overlay,
            layers=list(snap.layers) if snap is not None else [],
            template_root=snap.template_root if snap is not None else "",
            envd_access_token=secrets.token_hex(32),
            started_at=now,
            end_at=now + timeout,
            metadata={str(k): str(v) for k, v in (body.get("metadata") or {}).items()},
            env_vars=env_vars,
            cpu=s.sandboxhost_cpu,
            memory_mb=s.sandboxhost_memory_mb,
            pids=s.sandboxhost_pids,
            disk_mb=s.sandbox_disk_mb,
            network=net.mode,
            allow_out=net.allow_out,
            deny_out=net.deny_out,
            on_timeout="pause" if body.get("autoPause") else "kill",
            auto_pause_memory=body.get("autoPauseMemory", True) is not False,
            auto_resume=bool(auto_resume.get("enabled", False)),
            isolation=self.spec.isolation,
        )

    def timeout_of(self, value: Any) -> int:
        try:
            seconds = int(value)
        except (TypeError, ValueError) as exc:
            raise ControlError(
                400, f"timeout: expected seconds, got {value!r}"
            ) from exc
        if seconds <= 0:
            raise ControlError(400, "timeout: must be positive")
        return min(seconds, self.settings.sandboxhost_max_timeout)

    async def connect(
        self,
        sandbox_id: str,
        timeout: Any | None,  # noqa: ASYNC109 - E2B field
        tokens: TokenRequest | None = None,
        memory: bool = True,
    ) -> tuple[LocalSandbox, bool]:
        """Connect to a sandbox, resuming it if paused; True if it was resumed.

        ``memory=False`` (the SDK's ``on_resume="reboot"``) resumes a paused
        sandbox with fresh processes instead of thawing the frozen ones.
        """
        await self.faults.delay("connect")
        sandbox = self.get(sandbox_id)
        async with sandbox.lock:
            resumed = sandbox.record.state == "paused"
            if resumed:
                if not memory and sandbox.jail is not None:
                    await sandbox.stop()
                await self._resume(sandbox)
                # A resume through the control plane rotates the envd token at
                # once, so a grant handed out before the pause stops working.
                ttl = tokens.ttl_s if tokens is not None else None
                issue(sandbox.record, ttl, time.time(), 0.0)
            elif tokens is not None and tokens.rotate:
                issue(sandbox.record, tokens.ttl_s, time.time(), tokens.grace_s)
            if timeout is not None:
                new_end = time.time() + self.timeout_of(timeout)
                if resumed or new_end > sandbox.record.end_at:
                    sandbox.record.end_at = new_end
            elif resumed:
                sandbox.record.end_at = (
                    time.time() + self.settings.sandboxhost_default_timeout
                )
            self.store.save(sandbox.record)
        return sandbox, resumed

    async def _resume(self, sandbox: LocalSandbox) -> None:
        await self.faults.delay("resume")
        self.faults.check_resume(sandbox.sandbox_id)
        if sandbox.jail is None:
            try:
                await sandbox.boot()
            except JailError as exc:
                raise ControlError(500, str(exc)) from exc
        else:
            await sandbox.freeze(False)
        sandbox.record.state = "running"
        sandbox.record.pause_mode = "full"
        log.info("sandbox %s resumed", sandbox.sandbox_id)

    async def pause(self, sandbox_id: str, memory: bool = True) -> None:
        """Freeze every process (memory kept), or stop them if ``memory`` is false."""
        await self.faults.delay("pause")
        sandbox = self.get(sandbox_id)
        async with sandbox.lock:
            if sandbox.record.state == "paused":
                raise ControlError(409, f"sandbox {sandbox_id} is already paused")
            await self._pause(sandbox, memory)

    async def _pause(self, sandbox: LocalSandbox, memory: bool) -> None:
        if memory and sandbox.jail is not None:
            await sandbox.freeze(True)
            sandbox.record.pause_mode = "full"
        else:
            await sandbox.stop()
            sandbox.record.pause_mode = "filesystem"
        sandbox.record.state = "paused"
        self.store.save(sandbox.record)
        log.info(
            "sandbox %s paused (%s)", sandbox.sandbox_id, sandbox.record.pause_mode
        )

    async def kill(self, sandbox_id: str) -> None:
        """Kill the sandbox's processes and delete its record and files."""
        await self.faults.delay("kill")
        sandbox = self.get(sandbox_id)
        async with sandbox.lock:
            self.sandboxes.pop(sandbox_id, None)
            await sandbox.stop()
            await asyncio.to_thread(self.store.delete, sandbox_id)
            self.metrics.forget(sandbox_id)
        log.info("sandbox %s killed", sandbox_id)

    async def set_timeout(self, sandbox_id: str, timeout: Any) -> None:  # noqa: ASYNC109
        """Move the sandbox's deadline to now + timeout."""
        await self.faults.delay("timeout")
        sandbox = self.get(sandbox_id)
        sandbox.record.end_at = time.time() + self.timeout_of(timeout)
        self.store.save(sandbox.record)

    # --- clocks ----------------------------------------------------------------
    async def enforce_timeouts(self, stop: asyncio.Event) -> None:
        """Kill (or pause, if the lifecycle asks) sandboxes past their deadline."""
        while not stop.is_set():
            now = time.time()
            for sandbox in list(self.sandboxes.values()):
                rec = sandbox.record
                if rec.state == "running" and rec.end_at <= now:
                    await self._expire(sandbox)
                elif sandbox.sandbox_id in self.restoring:
                    continue
                elif rec.state == "running" and self.metrics.due(sandbox, now):
                    await asyncio.to_thread(self.metrics.sample, sandbox)
            try:
                async with asyncio.timeout(0.25):
                    await stop.wait()
            except TimeoutError:
                pass

    async def _expire(self, sandbox: LocalSandbox) -> None:
        sid = sandbox.sandbox_id
        try:
            if sandbox.record.on_timeout == "pause":
                async with sandbox.lock:
                    if sandbox.record.state == "running":
                        memory = sandbox.record.auto_pause_memory
                        await self._pause(sandbox, memory=memory)
                log.info("sandbox %s paused on timeout", sid)
            else:
                await self.kill(sid)
                log.info("sandbox %s killed on timeout", sid)
        except ControlError as exc:
            log.warning("timeout of sandbox %s: %s", sid, exc)

    # --- wire shapes -------------------------------------------------------------
    def sandbox_json(self, sandbox: LocalSandbox) -> dict[str, Any]:
        """The E2B ``Sandbox`` object (create/connect answer)."""
        rec = sandbox.record
        return {
            "templateID": rec.template_id,
            "sandboxID": rec.sandbox_id,
            "alias": rec.alias,
            "clientID": CLIENT_ID,
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": rec.envd_access_token,
            "trafficAccessToken": None,
            "domain": None,
            **_expiry_json(rec),
        }

    def listed_json(self, sandbox: LocalSandbox) -> dict[str, Any]:
        """The E2B ``ListedSandbox`` object, plus the host's own facts."""
        rec = sandbox.record
        out: dict[str, Any] = {
            "templateID": rec.template_id,
            "alias": rec.alias,
            "sandboxID": rec.sandbox_id,
            "clientID": CLIENT_ID,
            "startedAt": iso(rec.started_at),
            "endAt": iso(rec.end_at),
            "envdVersion": ENVD_VERSION,
            "cpuCount": max(int(rec.cpu), 1),
            "memoryMB": rec.memory_mb,
            "diskSizeMB": rec.disk_mb,
            "state": rec.state,
            "metadata": rec.metadata,
            "isolation": rec.isolation,
            "networkMode": rec.network,
        }
        if rec.processes_lost_at is not None:
            out["processesLostAt"] = iso(rec.processes_lost_at)
        return out

    def detail_json(self, sandbox: LocalSandbox) -> dict[str, Any]:
        """The E2B ``SandboxDetail`` object."""
        rec = sandbox.record
        out = self.listed_json(sandbox)
        out.update(
            envdAccessToken=rec.envd_access_token,
            domain=None,
            allowInternetAccess=rec.network != "none",
            lifecycle={
                "onTimeout": rec.on_timeout,
                "autoResume": rec.auto_resume,
            },
            pauseMode=rec.pause_mode,
            **_expiry_json(rec),
        )
        return out


def _expiry_json(rec: HostSandboxRecord) -> dict[str, Any]:
    """``envdAccessTokenExpiresAt`` (epoch seconds) only for expiring tokens."""
    if rec.envd_token_expires_at is None:
        return {}
    return {"envdAccessTokenExpiresAt": rec.envd_token_expires_at}


def _copy_files(src: Path, fs: Path) -> None:
    """Without overlayfs a sandbox from a snapshot starts with a full copy."""
    from services.sandboxhost.layers import copy_tree

    copy_tree(src, fs)
