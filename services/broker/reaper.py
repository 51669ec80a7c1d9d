"""Bring sandboxes down: pause after T2 idle, archive after T3 paused, delete.

Also the turn-end save (incremental archive while the sandbox keeps running)
and the periodic sweep that applies the timers and finishes abandoned claims.
Every decision is the state machine's (``machine.py``); this module carries
out the provider calls it asks for, through the driver's public methods.
"""

from __future__ import annotations

import asyncio
import logging
import time

from services.broker import machine
from services.broker import machine_io as m
from services.broker.archive import ArchiveLimitError
from services.broker.errors import ProviderError, SandboxError, SandboxNotFoundError
from services.broker.lifecycle import Lifecycle
from services.broker.records import Versioned
from services.envd import EnvdError

log = logging.getLogger(__name__)


class Reaper:
    """The down-side transitions, each a claimed step then a settling one."""

    def __init__(self, life: Lifecycle) -> None:
        self.life = life
        self._saving: dict[str, asyncio.Lock] = {}

    # ---- pause (T2) -----------------------------------------------------------

    async def pause(self, session_id: str, reason: str, idle_s: float = 0.0) -> bool:
        """Pause a running sandbox idle for at least ``idle_s``; True if paused."""
        life = self.life
        event = m.Pause(idle_s=idle_s, **life.claim_of(reason))
        got = await life.apply(session_id, event)
        if not isinstance(got.effect, m.PauseSandbox):
            return False
        sandbox_id = got.effect.sandbox_id
        started = time.monotonic()
        owner = life.replica
        try:
            async with life.holding(session_id):
                await life.provider.pause(sandbox_id)
        except SandboxNotFoundError:
            await life.settle(session_id, m.Vanished(owner=owner), started)
            return False
        except ProviderError as exc:
            if await life.settled(sandbox_id) != "paused":
                failed = m.PauseFailed(owner=owner, reason=f"pause failed: {exc}")
                await life.settle(session_id, failed, started)
                return False
        await life.settle(session_id, m.Paused(owner=owner, reason=reason), started)
        return True

    # ---- archive (T3) ---------------------------------------------------------

    async def archive(self, session_id: str, reason: str, after_s: float = 0.0) -> bool:
        """Save the workspace if needed, then delete the paused sandbox."""
        life = self.life
        event = m.Archive(after_s=after_s, **life.claim_of(reason))
        got = await life.apply(session_id, event)
        action = got.effect
        if not isinstance(action, m.SaveAndRemove):
            return False
        started = time.monotonic()
        owner = life.replica
        try:
            async with life.holding(session_id):
                manifest = await self._final_save(session_id, action)
        except SandboxNotFoundError:
            # Gone already: nothing left to save; the last archive is the truth.
            await life.settle(session_id, m.Vanished(owner=owner), started)
            return False
        except ArchiveLimitError as exc:
            # Over a size limit: the next sweep would only hit it again.
            failed = m.ArchiveFailed(owner=owner, reason=str(exc), wait_t3=True)
            await life.settle(session_id, failed, started)
            return False
        except (SandboxError, EnvdError) as exc:
            # Never delete a workspace we could not save.
            failed = m.ArchiveFailed(owner=owner, reason=f"archive failed: {exc}")
            await life.settle(session_id, failed, started)
            return False
        if action.sandbox_id:
            await life.kill_quietly(action.sandbox_id)
        done = m.Archived(owner=owner, reason=reason, manifest=manifest)
        await life.settle(session_id, done, started)
        return True

    async def _final_save(self, session_id: str, action: m.SaveAndRemove) -> str | None:
        life = self.life
        if not action.dirty or life.workspace is None or not action.sandbox_id:
            return action.base
        conn = await life.provider.connect(action.sandbox_id)
        link = life.link_of(conn)
        return await life.workspace.save(link, session_id, action.base)

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
            await life.apply(
                session_id, m.Saved(base=rec.last_archive, manifest=manifest)
            )
            return manifest

    # ---- delete ---------------------------------------------------------------

    async def delete(self, session_id: str, reason: str) -> bool:
        """Delete the sandbox with the session; archives stay for the retention."""
        life = self.life
        for _ in range(20):
            got = await life.apply(session_id, m.Delete(**life.claim_of(reason)))
            action = got.effect
            if isinstance(action, m.Refused):
                return False
            if isinstance(action, m.Wait):
                await life.wait_unleased(session_id)
                continue
            assert isinstance(action, m.Kill)
            started = time.monotonic()
            if action.sandbox_id:
                await life.kill_quietly(action.sandbox_id)
            await life.settle(session_id, m.Deleted(owner=life.replica), started)
            return True
        return False

    # ---- abandoned claims -------------------------------------------------------

    async def recover(self, session_id: str) -> None:
        """Finish or undo a pause or archive whose holder died (lease ran out)."""
        life = self.life
        got = await life.apply(session_id, m.Recover(**life.claim_of("recovery")))
        action = got.effect
        if not isinstance(action, m.Probe):
            return
        started = time.monotonic()
        real = await life.settled(action.sandbox_id) if action.sandbox_id else None
        await life.settle(session_id, m.Probed(owner=life.replica, real=real), started)

    # ---- the sweep ------------------------------------------------------------

    async def sweep_once(self) -> None:
        """Apply T2/T3, take over abandoned claims and purge, for every record."""
        async for cur in self.life.store.all():
            try:
                await self._due(cur)
            except (SandboxError, EnvdError) as exc:
                log.warning("sweep of %s: %s", cur.record.session_id, exc)

    async def _due(self, cur: Versioned) -> None:
        s = self.life.settings
        tick = m.Tick(
            idle_s=s.sandbox_idle_pause_s,
            archive_after_s=s.sandbox_archive_after_s,
            retention_s=s.sandbox_archive_retention_s,
        )
        step = machine.step(cur.record, tick, self.life.now())
        due = step.actions[0] if step.actions else None
        if not isinstance(due, m.Due):
            return
        sid = cur.record.session_id
        match due.what:
            case "pause":
                await self.pause(sid, "idle", s.sandbox_idle_pause_s)
            case "archive":
                await self.archive(sid, "paused too long", s.sandbox_archive_after_s)
            case "bring_up":
                await self.life.ensure_running(sid, "recovery")
            case "delete":
                await self.delete(sid, cur.record.reason or "recovery")
            case "recover":
                await self.recover(sid)
            case "purge":
                await self.purge(sid)

    async def purge(self, session_id: str) -> None:
        """Drop a deleted session's archives after the retention (the record stays)."""
        life = self.life
        if life.workspace is not None:
            await life.workspace.forget(session_id)
        # A tombstone, not a removal: a deleted session must never get a sandbox.
        await life.apply(session_id, m.Purged())
