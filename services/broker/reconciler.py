"""The reconciler: kill sandboxes no record owns; mark vanished ones."""

from __future__ import annotations

import logging

from services.broker import machine_io as m
from services.broker.lifecycle import Lifecycle
from services.broker.records import Versioned

log = logging.getLogger(__name__)

PREFIX_KEY = "agentbus_prefix"
SESSION_KEY = "agentbus_session"
GEN_KEY = "agentbus_gen"


class Reconciler:
    """Compares the provider's list with the records of this deployment's prefix."""

    def __init__(self, life: Lifecycle) -> None:
        self.life = life

    async def run_once(self) -> tuple[list[str], list[str]]:
        """One pass; returns (killed sandbox ids, sessions marked vanished)."""
        life = self.life
        # Records first: a record read before the listing that names a sandbox
        # means the sandbox existed before the listing (create settles after).
        before = {cur.record.session_id: cur async for cur in life.store.all()}
        listed = await life.provider.list()
        ours = [s for s in listed if s.metadata.get(PREFIX_KEY) == life.names.prefix]
        killed = []
        for info in ours:
            if not await self._owned(info.sandbox_id, info.metadata):
                log.warning("killing orphan sandbox %s", info.sandbox_id)
                await life.kill_quietly(info.sandbox_id)
                killed.append(info.sandbox_id)
        alive = {s.sandbox_id for s in listed}
        vanished = [
            cur
            for cur in before.values()
            if cur.record.sandbox_id
            and cur.record.sandbox_id not in alive
            and cur.record.state in ("running", "paused")
        ]
        marked = [c.record.session_id for c in vanished if await self._mark(c)]
        return killed, marked

    async def _owned(self, sandbox_id: str, meta: dict[str, str]) -> bool:
        cur = await self.life.store.get(meta.get(SESSION_KEY, ""))
        rec = cur.record
        if rec.sandbox_id == sandbox_id:
            return True
        # A create in flight has not recorded its sandbox id yet.
        creating = rec.state in ("creating", "rebuilding") and rec.leased(
            self.life.now()
        )
        return creating and meta.get(GEN_KEY) == str(rec.generation)

    async def _mark(self, cur: Versioned) -> bool:
        rec = cur.record
        gone = m.Gone(sandbox_id=rec.sandbox_id or "")
        done = await self.life.apply(rec.session_id, gone)
        if done.changed:
            log.warning("sandbox of %s vanished", rec.session_id)
        return done.changed
