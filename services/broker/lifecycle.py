"""The per-session state machine: create, resume, rebuild, pause, archive, delete.

Every transition is a revision CAS on the session's KV record. A replica first
claims a transitional state (``creating``, ``resuming`` …) with a lease, talks to
the provider, then CASes the settled state. A replica that dies mid-operation
leaves a claim whose lease runs out; the next one to look takes it over, asks
the provider what really happened, and finishes the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol, get_args

import aiohttp
import msgspec

from eventstore.log import JetStreamLog
from schemas.events import SandboxState, SandboxStateName
from schemas.names import BusNames
from services.broker import identity
from services.broker.errors import (
    IdentityMismatchError,
    ProviderError,
    SandboxError,
    SandboxNotFoundError,
)
from services.broker.link import SandboxLink
from services.broker.providers.base import Connection, Provider, token_margin_s
from services.broker.records import (
    TRANSITIONAL,
    RecordStore,
    SandboxRecord,
    State,
    Versioned,
)
from services.broker.settings import BrokerSettings
from services.envd import EnvdAuthError, EnvdClient, EnvdError

log = logging.getLogger(__name__)

REBUILT_NOTICE = (
    "the remote computer was rebuilt; earlier processes and terminals are gone"
)


_EVENT_STATES = frozenset(get_args(SandboxStateName))


class Workspace(Protocol):
    """Saves and restores a sandbox's /workspace (see ``archive.Archiver``)."""

    async def save(self, link: SandboxLink, session_id: str, base: str | None) -> str:
        """Archive what changed since ``base``; returns the new manifest name."""
        ...

    async def restore(self, link: SandboxLink, manifest: str) -> None:
        """Replay an archive into an empty workspace."""
        ...

    async def forget(self, session_id: str) -> None:
        """Delete every archive object of a session."""
        ...


class SessionDeletedError(SandboxError):
    """The session's sandbox was deleted with the session."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} is deleted")


def _r(rec: SandboxRecord, **changes: object) -> SandboxRecord:
    return msgspec.structs.replace(rec, **changes)


def _fields(rec: SandboxRecord, *names: str) -> dict[str, object]:
    return {name: getattr(rec, name) for name in names}


class Lifecycle:
    """Drives one provider's sandboxes for every session, CAS-safe across replicas."""

    def __init__(
        self,
        settings: BrokerSettings,
        names: BusNames,
        provider: Provider,
        store: RecordStore,
        events: JetStreamLog | None,
        http: aiohttp.ClientSession,
        workspace: Workspace | None = None,
        replica: str = "",
    ) -> None:
        self.settings = settings
        self.names = names
        self.provider = provider
        self.store = store
        self.events = events
        self.http = http
        self.workspace = workspace
        self.replica = replica or "b-" + secrets.token_hex(4)
        self._clock: Callable[[], float] = time.time

    # ---- helpers ------------------------------------------------------------

    def link(self, rec: SandboxRecord) -> SandboxLink:
        """Where a record's current sandbox is reached."""
        return SandboxLink(rec.envd_url, rec.sandbox_id or "", rec.access_token)

    def envd(self, rec: SandboxRecord) -> EnvdClient:
        """An envd client for a record's current sandbox."""
        return self.link(rec).envd(self.http)

    async def emit(
        self, rec: SandboxRecord, reason: str, started: float | None = None
    ) -> None:
        """Append ``sandbox.state`` to the session log (best effort)."""
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
        try:
            await self.events.append(rec.session_id, payload, actor="broker")
        except Exception:  # the lifecycle must not stall on the log
            log.exception("sandbox.state for %s not appended", rec.session_id)

    async def claim(
        self, cur: Versioned, state: State, reason: str, **changes: object
    ) -> Versioned | None:
        """CAS the record into a transitional ``state`` held by this replica."""
        rec = _r(
            cur.record,
            state=state,
            owner=self.replica,
            lease_until=self._clock() + self.settings.broker_op_lease_s,
            provider=self.provider.name,
            reason=reason,
            **changes,
        )
        got = await self.store.put(cur, rec)
        if got is not None:
            await self.emit(rec, reason)
        return got

    async def settle(
        self,
        claimed: Versioned,
        state: State,
        reason: str,
        started: float,
        **ch: object,
    ) -> SandboxRecord:
        """CAS a claimed record to a settled state (only if we still hold it)."""

        def fn(rec: SandboxRecord) -> SandboxRecord | None:
            if rec.owner != self.replica or rec.state != claimed.record.state:
                return None
            return _r(rec, state=state, owner="", lease_until=0.0, reason=reason, **ch)

        done = await self.store.change(claimed.record.session_id, fn)
        if done is None:
            raise SandboxError(f"lost the claim on {claimed.record.session_id}")
        await self.emit(done.record, reason, started)
        return done.record

    @contextlib.asynccontextmanager
    async def holding(self, session_id: str) -> AsyncIterator[None]:
        """Keep this replica's lease on a claim alive while a long step runs."""
        task = asyncio.create_task(self._renew(session_id))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _renew(self, session_id: str) -> None:
        lease = self.settings.broker_op_lease_s

        def fn(cur: SandboxRecord) -> SandboxRecord | None:
            if cur.owner != self.replica or cur.state not in TRANSITIONAL:
                return None
            return _r(cur, lease_until=self._clock() + lease)

        while True:
            await asyncio.sleep(lease / 3)
            await self.store.change(session_id, fn)

    async def wait_unleased(self, session_id: str) -> Versioned:
        """The record once no live lease holds it (another replica is working)."""
        while True:
            cur = await self.store.get(session_id)
            if not cur.record.leased(self._clock()):
                return cur
            await asyncio.sleep(0.05)

    # ---- bring up -----------------------------------------------------------

    async def ensure_running(self, session_id: str, reason: str) -> SandboxRecord:
        """The session's sandbox, running and identity-checked, however it was."""
        for _ in range(20):
            cur = await self.wait_unleased(session_id)
            rec = cur.record
            if rec.state in ("deleted", "deleting"):
                raise SessionDeletedError(session_id)
            if rec.state == "running":
                return rec
            state, why, changes = self._plan(rec)
            claimed = await self.claim(cur, state, f"{reason}: {why}", **changes)
            if claimed is None:
                continue
            try:
                async with self.holding(session_id):
                    if state == "resuming":
                        return await self._resume(claimed)
                    return await self._create(claimed)
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

        def fn(cur: SandboxRecord) -> SandboxRecord | None:
            if cur.owner != self.replica or not cur.leased(self._clock()):
                return None
            return _r(cur, state="failed", owner="", lease_until=0.0, reason=reason)

        done = await self.store.change(session_id, fn)
        if done is not None:
            await self.emit(done.record, reason)

    def _plan(self, rec: SandboxRecord) -> tuple[State, str, dict[str, object]]:
        if rec.state in ("creating", "rebuilding"):
            # Same generation and nonce: the create key finds what the dead
            # replica may already have started instead of starting another.
            return rec.state, f"took over an unfinished {rec.state}", {}
        fresh: dict[str, object] = {
            "generation": rec.generation + 1,
            "nonce": secrets.token_hex(16),
        }
        if rec.state == "none" or not (rec.sandbox_id or rec.last_active):
            return "creating", "first use", fresh  # never ran: nothing to rebuild
        if rec.sandbox_id:
            # Whatever the record says, the provider decides: resume asks it,
            # retries, re-checks identity, and rebuilds only if all that fails.
            return "resuming", f"was {rec.state}", {}
        return "rebuilding", f"was {rec.state}", fresh

    async def _create(self, claimed: Versioned) -> SandboxRecord:
        rec = claimed.record
        started = time.monotonic()
        rebuild = rec.state == "rebuilding"
        meta = {
            "agentbus_prefix": self.names.prefix,
            "agentbus_session": rec.session_id,
            "agentbus_gen": str(rec.generation),
        }
        key = f"{self.names.prefix}-{rec.session_id}-{rec.generation}"
        conn = await self.provider.create(meta, key)
        if rebuild and rec.sandbox_id and rec.sandbox_id != conn.sandbox_id:
            await self._kill_quietly(rec.sandbox_id)
        envd = self._envd_of(conn)
        await identity.plant(envd, rec.nonce)
        await identity.verify(envd, rec.session_id, rec.nonce)
        if rebuild and rec.last_archive and self.workspace is not None:
            await self.workspace.restore(self.link_of(conn), rec.last_archive)
        return await self.settle(
            claimed,
            "running",
            "rebuilt from the archive" if rebuild else "created",
            started,
            **self._conn_fields(conn),
            rebuilt=rebuild,
            notice_pending=rebuild or rec.notice_pending,
            dirty=True,
        )

    @staticmethod
    def link_of(conn: Connection) -> SandboxLink:
        """Where a fresh connection's sandbox is reached."""
        return SandboxLink(conn.envd_url, conn.sandbox_id, conn.access_token)

    def _envd_of(self, conn: Connection) -> EnvdClient:
        return self.link_of(conn).envd(self.http)

    def _conn_fields(self, conn: Connection) -> dict[str, object]:
        now = self._clock()
        return {
            "sandbox_id": conn.sandbox_id,
            "envd_url": conn.envd_url,
            "access_token": conn.access_token,
            "token_expires_at": conn.token_expires_at,
            "last_active": now,
            "paused_at": 0.0,
        }

    async def _kill_quietly(self, sandbox_id: str) -> None:
        try:
            await self.provider.kill(sandbox_id)
        except ProviderError as exc:
            log.warning("kill of replaced sandbox %s failed: %s", sandbox_id, exc)

    # ---- resume -------------------------------------------------------------

    async def _resume(self, claimed: Versioned) -> SandboxRecord:
        rec = claimed.record
        started = time.monotonic()
        conn = await self._resume_with_retries(rec)
        if conn is not None:
            try:
                await identity.verify(self._envd_of(conn), rec.session_id, rec.nonce)
            except (IdentityMismatchError, EnvdError) as exc:
                log.warning("resumed sandbox %s refused: %s", conn.sandbox_id, exc)
                conn = None
        if conn is None:
            return await self._rebuild_from(claimed, "resume failed")
        return await self.settle(
            claimed,
            "running",
            "resumed" if conn.resumed else "reconnected",
            started,
            **self._conn_fields(conn),
            rebuilt=False,
            dirty=True,
        )

    async def _resume_with_retries(self, rec: SandboxRecord) -> Connection | None:
        sid = rec.sandbox_id or ""
        delay = self.settings.broker_resume_backoff_s
        for attempt in range(max(self.settings.broker_resume_attempts, 1)):
            info = await self._settled(sid)
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
        if await self._settled(sid) == "running":
            try:
                return await self.provider.connect(sid)
            except ProviderError:
                return None
        return None

    async def _settled(self, sandbox_id: str, wait_s: float = 10.0) -> str | None:
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

    async def _rebuild_from(self, claimed: Versioned, why: str) -> SandboxRecord:
        """Switch a claim to ``rebuilding`` with a new generation and create cold."""
        rec = claimed.record
        rebuilding = _r(
            rec,
            state="rebuilding",
            generation=rec.generation + 1,
            nonce=secrets.token_hex(16),
            reason=why,
        )

        def fn(cur: SandboxRecord) -> SandboxRecord | None:
            if cur.owner != self.replica or cur.state != rec.state:
                return None
            return _r(
                cur, **_fields(rebuilding, "state", "generation", "nonce", "reason")
            )

        got = await self.store.change(rec.session_id, fn)
        if got is None:
            raise SandboxError(f"lost the claim on {rec.session_id}")
        await self.emit(got.record, why)
        return await self._create(got)

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
                await self._mark_failed(rec, "identity check failed")
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
        return rec.token_expires_at - self._clock() < lead

    async def fresh(self, rec: SandboxRecord) -> SandboxRecord:
        """The record with a token good for a while (rotated if it was stale)."""
        if rec.state == "running" and self.token_stale(rec):
            return await self.refresh_token(rec)
        return rec

    async def refresh_token(self, rec: SandboxRecord) -> SandboxRecord:
        """Re-acquire (rotate) the data-plane token of a running sandbox."""
        conn = await self.provider.connect(rec.sandbox_id or "")

        def fn(cur: SandboxRecord) -> SandboxRecord | None:
            if cur.state != "running" or cur.sandbox_id != conn.sandbox_id:
                return None
            if 0 < conn.token_expires_at < cur.token_expires_at:
                return None  # a concurrent rotation stored a newer token
            return _r(
                cur,
                access_token=conn.access_token,
                token_expires_at=conn.token_expires_at,
                envd_url=conn.envd_url,
            )

        done = await self.store.change(rec.session_id, fn)
        if done is not None:
            return done.record
        cur = (await self.store.get(rec.session_id)).record
        same = cur.state == "running" and cur.sandbox_id == rec.sandbox_id
        return cur if same else rec

    async def _mark_failed(self, rec: SandboxRecord, why: str) -> None:
        def fn(cur: SandboxRecord) -> SandboxRecord | None:
            if cur.state != "running" or cur.sandbox_id != rec.sandbox_id:
                return None
            return _r(cur, state="paused", reason=why)

        # "paused" routes the next ensure_running through resume, which asks
        # the provider, re-checks identity, and rebuilds if it still fails.
        await self.store.change(rec.session_id, fn)

    # ---- activity -------------------------------------------------------------

    async def touch(self, session_id: str) -> None:
        """Record activity (resets T2; marks the workspace possibly changed)."""
        now = self._clock()
        # Debounced: a busy session does not write its record on every call.
        debounce_s = min(1.0, self.settings.sandbox_idle_pause_s / 10)

        def fn(cur: SandboxRecord) -> SandboxRecord | None:
            if cur.state in ("none", "deleted", "deleting"):
                return None
            dirty = cur.dirty or cur.state == "running"
            if now - cur.last_active < debounce_s and cur.dirty == dirty:
                return None
            # Only a running sandbox can have changed; activity on a paused one
            # just means a bind is coming (T3 then need not resume to save).
            return _r(cur, last_active=max(now, cur.last_active), dirty=dirty)

        await self.store.change(session_id, fn)
