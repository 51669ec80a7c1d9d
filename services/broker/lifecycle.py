"""The per-session state machine: create, resume, rebuild, pause, archive, delete.

The decisions are the pure state machine in ``machine.py``; this module is its
driver. Every transition is a revision CAS on the session's KV record. A
replica first claims a transitional state (``creating``, ``resuming`` …) with a
lease it renews while it works, talks to the provider, then CASes the settled
state. A replica that dies mid-operation leaves a claim whose lease runs out
within ``broker_op_lease_s``; the next one to look takes it over, asks the
provider what really happened, and finishes the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import get_args

import aiohttp

from eventstore.log import JetStreamLog
from schemas.events import Payload, SandboxState, SandboxStateName
from schemas.names import BusNames
from services.broker import identity, machine, metering
from services.broker import machine_io as m
from services.broker.archive import Workspace
from services.broker.errors import (
    IdentityMismatchError,
    ProviderError,
    SandboxError,
    SandboxNotFoundError,
)
from services.broker.link import SandboxLink
from services.broker.machine_io import Applied, ClaimFields, conn_of
from services.broker.providers.base import Connection, Provider, token_margin_s
from services.broker.records import KvRecordStore, SandboxRecord, Versioned
from services.broker.settings import BrokerSettings
from services.common.tasks import cancel_and_wait
from services.envd import EnvdAuthError, EnvdClient, EnvdError

log = logging.getLogger(__name__)

REBUILT_NOTICE = (
    "the remote computer was rebuilt; earlier processes and terminals are gone"
)


_EVENT_STATES = frozenset(get_args(SandboxStateName))
EMIT_ATTEMPTS = 4
# A worker that died mid-tool stops renewing; its hold ends within this.
MAX_HOLD_S = 120.0


class SessionDeletedError(SandboxError):
    """The session's sandbox was deleted with the session."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} is deleted")


class Lifecycle:
    """The async driver of :mod:`services.broker.machine` for one provider.

    It reads a record, steps the pure machine, CASes the result, and carries
    out the actions (announce, provider calls, waiting on a lease). The clock is
    injected (``clock``) so timers and leases are testable without sleeping.
    """

    def __init__(
        self,
        settings: BrokerSettings,
        names: BusNames,
        provider: Provider,
        store: KvRecordStore,
        events: JetStreamLog | None,
        http: aiohttp.ClientSession,
        workspace: Workspace | None = None,
        replica: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.names = names
        self.provider = provider
        self.store = store
        self.events = events
        self.http = http
        self.workspace = workspace
        self.replica = replica or "b-" + secrets.token_hex(4)
        self.clock = clock
        self.unreported = 0  # sandbox.state appends that failed every retry

    # ---- helpers ------------------------------------------------------------

    def now(self) -> float:
        """The broker's clock (unix seconds)."""
        return self.clock()

    def link(self, rec: SandboxRecord) -> SandboxLink:
        """Where a record's current sandbox is reached."""
        return SandboxLink(rec.envd_url, rec.sandbox_id or "", rec.access_token)

    def envd(self, rec: SandboxRecord) -> EnvdClient:
        """An envd client for a record's current sandbox."""
        return self.link(rec).envd(self.http)

    def claim_of(self, reason: str) -> ClaimFields:
        """The fields of a :class:`machine.Claim` made by this replica."""
        return {
            "owner": self.replica,
            "lease_s": self.settings.broker_op_lease_s,
            "provider": self.provider.name,
            "reason": reason,
        }

    async def emit(
        self, rec: SandboxRecord, reason: str, started: float | None = None
    ) -> None:
        """Append ``sandbox.state`` to the session log (see :meth:`append`)."""
        if self.events is None or rec.state not in _EVENT_STATES:
            return  # archiving/deleting are announced by their settled state
        took = (time.monotonic() - started) * 1000 if started else 0.0
        payload = SandboxState(
            state=rec.state,  # type: ignore[arg-type]
            reason=reason,
            duration_ms=round(took, 2),
            provider=self.provider.name,
            sandbox_id=rec.sandbox_id,
            rebuilt=rec.rebuilt,
        )
        await self.append(rec.session_id, payload)

    async def append(self, session_id: str, payload: Payload) -> None:
        """Append a broker event to the session log, retried a few times.

        The record is already changed, so the transition is not undone: a
        failure after every retry is logged as an error and counted in
        ``unreported`` (the lifecycle must not stall on the log).
        """
        if self.events is None:
            return
        delay = 0.1
        for attempt in range(EMIT_ATTEMPTS):
            try:
                await self.events.append(session_id, payload, actor="broker")
                return
            except Exception as exc:
                if attempt == EMIT_ATTEMPTS - 1:
                    self.unreported += 1
                    log.error(
                        "%s for %s not appended after %d tries: %s",
                        payload.TYPE,
                        session_id,
                        EMIT_ATTEMPTS,
                        exc,
                    )
                    return
            await asyncio.sleep(delay)
            delay *= 3

    async def apply(
        self, session_id: str, event: m.Event, started: float | None = None
    ) -> Applied:
        """Step the machine on the stored record and CAS the result (re-read on
        conflict), then announce it."""
        for _ in range(50):
            cur = await self.store.get(session_id)
            step = machine.step(cur.record, event, self.now())
            if step.record is None:
                return Applied(cur, step.actions, False)
            done = await self.store.put(cur, step.record)
            if done is None:
                continue
            for action in step.actions:
                if isinstance(action, m.Emit):
                    await self.emit(done.record, action.reason, started)
                elif isinstance(action, m.Meter):
                    await self.append(session_id, metering.usage_event(action))
            return Applied(done, step.actions, True)
        raise RuntimeError(f"record {session_id}: CAS contention did not settle")

    async def settle(
        self, session_id: str, event: m.Event, started: float
    ) -> SandboxRecord:
        """Apply a settling event; :class:`SandboxError` if the claim was lost."""
        done = await self.apply(session_id, event, started)
        if not done.changed:
            raise SandboxError(f"lost the claim on {session_id}")
        return done.record

    @contextlib.asynccontextmanager
    async def holding(self, session_id: str) -> AsyncIterator[None]:
        """Keep this replica's lease on a claim alive while a long step runs."""
        task = asyncio.create_task(self._renew(session_id))
        try:
            yield
        finally:
            await cancel_and_wait(task)

    async def _renew(self, session_id: str) -> None:
        lease = self.settings.broker_op_lease_s
        renew = m.Renew(owner=self.replica, lease_s=lease)
        while True:
            await asyncio.sleep(lease / 3)
            try:
                done = await self.apply(session_id, renew)
            except Exception as exc:
                log.warning("lease of %s not renewed: %s", session_id, exc)
                continue
            if not done.changed:
                return  # no longer ours: the settle will find out

    async def wait_unleased(self, session_id: str) -> Versioned:
        """The record once no live lease holds it (another replica is working)."""
        while True:
            cur = await self.store.get(session_id)
            if not cur.record.leased(self.now()):
                return cur
            await asyncio.sleep(0.05)

    # ---- bring up -----------------------------------------------------------

    async def ensure_running(self, session_id: str, reason: str) -> SandboxRecord:
        """The session's sandbox, running and identity-checked, however it was."""
        for _ in range(20):
            event = m.BringUp(nonce=secrets.token_hex(16), **self.claim_of(reason))
            got = await self.apply(session_id, event)
            effect = got.effect
            if isinstance(effect, m.Refused):
                raise SessionDeletedError(session_id)
            if isinstance(effect, m.Ready):
                return got.record
            if isinstance(effect, m.Wait):
                await self.wait_unleased(session_id)
                continue
            try:
                async with self.holding(session_id):
                    if isinstance(effect, m.Resume):
                        return await self._resume(got.record)
                    assert isinstance(effect, m.Create)
                    return await self._create(got.record, effect)
            except (SandboxError, EnvdError) as exc:
                await self._abandon(session_id, exc)
                raise
        raise SandboxError(f"could not bring up the sandbox of {session_id}")

    async def _abandon(self, session_id: str, exc: Exception) -> None:
        """Release our claim as ``failed`` so the next try rebuilds at once.

        A sandbox the failed create may have started is not recorded; the
        reconciler kills it (its generation no longer has a live claim).
        """
        reason = f"bring-up failed: {exc}"[:300]
        await self.apply(session_id, m.Abandon(owner=self.replica, reason=reason))

    async def _create(self, rec: SandboxRecord, action: m.Create) -> SandboxRecord:
        started = time.monotonic()
        meta = {
            "agentbus_prefix": self.names.prefix,
            "agentbus_session": rec.session_id,
            "agentbus_gen": str(action.generation),
        }
        key = f"{self.names.prefix}-{rec.session_id}-{action.generation}"
        conn = await self.provider.create(meta, key)
        if action.replace and action.replace != conn.sandbox_id:
            await self.kill_quietly(action.replace)
        envd = self._envd_of(conn)
        await identity.plant(envd, rec.nonce)
        await identity.verify(envd, rec.session_id, rec.nonce)
        if action.rebuild and rec.last_archive and self.workspace is not None:
            await self.workspace.restore(self.link_of(conn), rec.last_archive)
        created = m.Created(owner=self.replica, conn=conn_of(conn))
        return await self.settle(rec.session_id, created, started)

    @staticmethod
    def link_of(conn: Connection) -> SandboxLink:
        """Where a fresh connection's sandbox is reached."""
        return SandboxLink(conn.envd_url, conn.sandbox_id, conn.access_token)

    def _envd_of(self, conn: Connection) -> EnvdClient:
        return self.link_of(conn).envd(self.http)

    async def kill_quietly(self, sandbox_id: str) -> None:
        """Kill a sandbox; a failure is logged (the reconciler catches leftovers)."""
        try:
            await self.provider.kill(sandbox_id)
        except ProviderError as exc:
            log.warning("kill of replaced sandbox %s failed: %s", sandbox_id, exc)

    # ---- resume -------------------------------------------------------------

    async def _resume(self, rec: SandboxRecord) -> SandboxRecord:
        started = time.monotonic()
        conn = await self._resume_with_retries(rec)
        if conn is not None:
            try:
                await identity.verify(self._envd_of(conn), rec.session_id, rec.nonce)
            except (IdentityMismatchError, EnvdError) as exc:
                log.warning("resumed sandbox %s refused: %s", conn.sandbox_id, exc)
                conn = None
        if conn is None:
            why = "resume failed"
            event = m.Rebuild(
                owner=self.replica, reason=why, nonce=secrets.token_hex(16)
            )
            got = await self.apply(rec.session_id, event)
            if not isinstance(got.effect, m.Create):
                raise SandboxError(f"lost the claim on {rec.session_id}")
            return await self._create(got.record, got.effect)
        resumed = m.Resumed(
            owner=self.replica, conn=conn_of(conn), resumed=conn.resumed
        )
        return await self.settle(rec.session_id, resumed, started)

    async def _resume_with_retries(self, rec: SandboxRecord) -> Connection | None:
        sid = rec.sandbox_id or ""
        delay = self.settings.broker_resume_backoff_s
        for attempt in range(max(self.settings.broker_resume_attempts, 1)):
            info = await self.settled(sid)
            if info is None or info == "failed":
                return None
            try:
                return await self.provider.connect(sid)
            except SandboxNotFoundError:
                return None
            except ProviderError as exc:
                log.warning("resume %s attempt %d: %s", sid, attempt + 1, exc)
            await asyncio.sleep(delay)
            delay *= 2
        # Before replacing it, ask what state it is really in: a resume that
        # answered an error may still have worked (E2B #987).
        if await self.settled(sid) == "running":
            try:
                return await self.provider.connect(sid)
            except ProviderError:
                return None
        return None

    async def settled(self, sandbox_id: str, wait_s: float = 10.0) -> str | None:
        """The provider's settled state of a sandbox (waits out transitions)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                info = await self.provider.describe(sandbox_id)
            except ProviderError as exc:
                log.warning("describe %s: %s", sandbox_id, exc)
                return "failed" if time.monotonic() > deadline else "unknown"
            if info is None:
                return None
            if info.state != "transitional" or time.monotonic() > deadline:
                return info.state
            await asyncio.sleep(0.1)

    # ---- identity on bind -----------------------------------------------------

    async def checked(self, session_id: str, reason: str) -> SandboxRecord:
        """``ensure_running`` plus a nonce read-back; a stranger is replaced."""
        for _ in range(3):
            rec = await self.ensure_running(session_id, reason)
            rec = await self.fresh(rec)
            try:
                await identity.verify(self.envd(rec), session_id, rec.nonce)
                return rec
            except EnvdAuthError:
                # 401: the provider's token expired or rotated; fetch a new one.
                await self.refresh_token(rec)
            except IdentityMismatchError:
                distrust = m.Distrusted(
                    sandbox_id=rec.sandbox_id or "", reason="identity check failed"
                )
                await self.apply(session_id, distrust)
            except EnvdError as exc:
                # A running sandbox whose envd hiccups is not replaced for it:
                # the caller gets an error and may retry.
                raise SandboxError(
                    f"envd of {rec.sandbox_id} unreachable: {exc}"
                ) from exc
        raise SandboxError(f"no trustworthy sandbox for {session_id}")

    def token_stale(self, rec: SandboxRecord) -> bool:
        """Less than ~10% of a grant's TTL (plus the provider margin) is left."""
        if not rec.token_expires_at:
            return False
        ttl = self.settings.broker_token_ttl_s
        lead = token_margin_s(ttl) + ttl / 10
        return rec.token_expires_at - self.now() < lead

    async def fresh(self, rec: SandboxRecord) -> SandboxRecord:
        """The record with a token good for a while (rotated if it was stale)."""
        if rec.state == "running" and self.token_stale(rec):
            return await self.refresh_token(rec)
        return rec

    async def refresh_token(self, rec: SandboxRecord) -> SandboxRecord:
        """Re-acquire (rotate) the data-plane token of a running sandbox."""
        conn = await self.provider.connect(rec.sandbox_id or "")
        done = await self.apply(rec.session_id, m.TokenRotated(conn=conn_of(conn)))
        if done.changed:
            return done.record
        cur = done.record
        same = cur.state == "running" and cur.sandbox_id == rec.sandbox_id
        return cur if same else rec

    # ---- activity -------------------------------------------------------------

    async def touch(self, session_id: str, hold_s: float = 0.0) -> None:
        """Record activity (resets T2; marks the workspace possibly changed);
        ``hold_s``: a running tool keeps the sandbox from pausing that long."""
        debounce_s = min(1.0, self.settings.sandbox_idle_pause_s / 10)
        touch = m.Touch(debounce_s=debounce_s, hold_s=min(hold_s, MAX_HOLD_S))
        await self.apply(session_id, touch)
