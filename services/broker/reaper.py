"""Bring sandboxes down: pause after T2 idle, archive after T3 paused, delete.

Also the turn-end save (incremental archive while the sandbox keeps running)
and the periodic sweep that applies the timers and finishes abandoned claims.
"""

from __future__ import annotations

import asyncio
import logging
import time

from services.broker.errors import ProviderError, SandboxError, SandboxNotFoundError
from services.broker.lifecycle import Lifecycle, _r
from services.broker.records import TRANSITIONAL, SandboxRecord, State, Versioned
from services.envd import EnvdError

log = logging.getLogger(__name__)


class Reaper:
    """The down-side transitions, each a CAS claim then a CAS settle."""

    def __init__(self, life: Lifecycle) -> None:
        self.life = life
        self._saving: dict[str, asyncio.Lock] = {}

    # ---- pause (T2) -----------------------------------------------------------

    async def pause(self, session_id: str, reason: str, idle_s: float = 0.0) -> bool:
        """Pause a running sandbox idle for at least ``idle_s``; True if paused."""
        life = self.life
        cur = await life.store.get(session_id)
        rec = cur.record
        if rec.state != "running" or not rec.sandbox_id:
            return False
        if idle_s and life._clock() - rec.last_active < idle_s:
            return False
        claimed = await life.claim(cur, "pausing", reason)
        if claimed is None:
            return False
        started = time.monotonic()
        try:
            await life.provider.pause(rec.sandbox_id)
        except SandboxNotFoundError:
            await life.settle(claimed, "failed", "sandbox vanished", started)
            return False
        except ProviderError as exc:
            if await life._settled(rec.sandbox_id) != "paused":
                await life.settle(claimed, "running", f"pause failed: {exc}", started)
                return False
        await life.settle(
            claimed,
            "paused",
            reason,
            started,
            paused_at=life._clock(),
            access_token=None,
        )
        return True

    # ---- archive (T3) ---------------------------------------------------------

    async def archive(self, session_id: str, reason: str, after_s: float = 0.0) -> bool:
        """Save the workspace if needed, then delete the paused sandbox."""
        life = self.life
        cur = await life.store.get(session_id)
        rec = cur.record
        if rec.state != "paused":
            return False
        if after_s and life._clock() - rec.paused_at < after_s:
            return False
        claimed = await life.claim(cur, "archiving", reason)
        if claimed is None:
            return False
        started = time.monotonic()
        try:
            async with life.holding(session_id):
                manifest = await self._final_save(claimed)
        except SandboxNotFoundError:
            # Gone already: nothing left to save; the last archive is the truth.
            state: State = "archived" if rec.last_archive else "failed"
            await life.settle(
                claimed, state, "sandbox vanished", started, sandbox_id=None
            )
            return False
        except (SandboxError, EnvdError) as exc:
            # Never delete a workspace we could not save.
            await life.settle(claimed, "paused", f"archive failed: {exc}", started)
            return False
        if rec.sandbox_id:
            await life._kill_quietly(rec.sandbox_id)
        await life.settle(
            claimed,
            "archived",
            reason,
            started,
            sandbox_id=None,
            access_token=None,
            last_archive=manifest,
            archived_at=life._clock(),
            dirty=False,
        )
        return True

    async def _final_save(self, claimed: Versioned) -> str | None:
        rec = claimed.record
        life = self.life
        if not rec.dirty or life.workspace is None or not rec.sandbox_id:
            return rec.last_archive
        conn = await life.provider.connect(rec.sandbox_id)
        link = life.link_of(conn)
        return await life.workspace.save(link, rec.session_id, rec.last_archive)

    # ---- turn-end save --------------------------------------------------------

    async def save(self, session_id: str) -> str | None:
        """Incremental archive of a running sandbox (it keeps running)."""
        life = self.life
        if life.workspace is None:
            return None
        lock = self._saving.setdefault(session_id, asyncio.Lock())
        async with lock:
            rec = (await life.store.get(session_id)).record
            if rec.state != "running" or not rec.sandbox_id:
                return None
            rec = await life.fresh(rec)  # an idle sandbox's token may be stale
            manifest = await life.workspace.save(
                life.link(rec), session_id, rec.last_archive
            )

            def fn(cur: SandboxRecord) -> SandboxRecord | None:
                if cur.last_archive != rec.last_archive:
                    return None  # someone saved meanwhile; theirs is newer
                return _r(cur, last_archive=manifest, dirty=False)

            await life.store.change(session_id, fn)
            await life.emit(_r(rec, last_archive=manifest), "workspace saved")
            return manifest

    # ---- delete ---------------------------------------------------------------

    async def delete(self, session_id: str, reason: str) -> bool:
        """Delete the sandbox with the session; archives stay for the retention."""
        life = self.life
        for _ in range(20):
            cur = await life.wait_unleased(session_id)
            rec = cur.record
            if rec.state == "deleted":
                return False
            claimed = await life.claim(cur, "deleting", reason)
            if claimed is None:
                continue
            started = time.monotonic()
            if rec.sandbox_id:
                await life._kill_quietly(rec.sandbox_id)
            await life.settle(
                claimed,
                "deleted",
                reason,
                started,
                sandbox_id=None,
                access_token=None,
                deleted_at=life._clock(),
            )
            return True
        return False

    # ---- abandoned claims -------------------------------------------------------

    async def recover(self, cur: Versioned) -> None:
        """Finish or undo a claim whose holder died (its lease ran out)."""
        rec = cur.record
        life = self.life
        if rec.state in ("creating", "rebuilding", "resuming"):
            await life.ensure_running(rec.session_id, "recovery")
        elif rec.state == "deleting":
            await self.delete(rec.session_id, rec.reason or "recovery")
        elif rec.state in ("pausing", "archiving"):
            claimed = await life.claim(cur, rec.state, "recovery")
            if claimed is None:
                return
            started = time.monotonic()
            real = await life._settled(rec.sandbox_id or "") if rec.sandbox_id else None
            if real == "running":
                await life.settle(claimed, "running", "recovered", started)
            elif real is None:
                await life.settle(
                    claimed, "failed", "sandbox vanished", started, sandbox_id=None
                )
            else:
                paused_at = rec.paused_at or life._clock()
                await life.settle(
                    claimed, "paused", "recovered", started, paused_at=paused_at
                )

    # ---- the sweep ------------------------------------------------------------

    async def sweep_once(self) -> None:
        """Apply T2/T3 and finish abandoned claims, for every record."""
        life = self.life
        s = life.settings
        now = life._clock()
        async for cur in life.store.all():
            rec = cur.record
            try:
                if (
                    rec.state == "running"
                    and now - rec.last_active >= s.sandbox_idle_pause_s
                ):
                    await self.pause(rec.session_id, "idle", s.sandbox_idle_pause_s)
                elif (
                    rec.state == "paused"
                    and now - rec.paused_at >= s.sandbox_archive_after_s
                ):
                    await self.archive(
                        rec.session_id, "paused too long", s.sandbox_archive_after_s
                    )
                elif rec.state in TRANSITIONAL and rec.lease_until < now:
                    await self.recover(cur)
                elif (
                    rec.state == "deleted"
                    and rec.last_archive
                    and now - rec.deleted_at >= s.sandbox_archive_retention_s
                ):
                    await self.purge(cur)
            except (SandboxError, EnvdError) as exc:
                log.warning("sweep of %s: %s", rec.session_id, exc)

    async def purge(self, cur: Versioned) -> None:
        """Drop a deleted session's archives after the retention (the record stays)."""
        life = self.life
        if life.workspace is not None:
            await life.workspace.forget(cur.record.session_id)
        # A tombstone, not a removal: a deleted session must never get a sandbox.
        await life.store.put(cur, _r(cur.record, last_archive=None))
