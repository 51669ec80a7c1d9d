"""The pool: N warm workers, durable wake-ups, leases, assignments, recovery.

A worker that is idle makes the pool pull one wake-up from the shared durable
consumer; the pool takes the session's lease (CAS), records the assignment the
broker's bind trusts (with the SHA-256 of a fresh one-time token), hands the
worker the lease and the token over its stdin, and only then acks the wake-up.
A session someone already owns needs no wake-up (its owner follows the log), so
that wake-up is acked and dropped. A child that dies while it owns a session is
recovered at once; leases that expire (a pool killed whole) are recovered by
every pool's sweeper.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from eventstore.log import JetStreamLog
from schemas.broker import Assignment
from schemas.ids import new_id, now_rfc3339
from schemas.names import BusNames
from services.common.tasks import cancel_all
from services.pool.cancellation import cancel_requested, raise_if_cancelled
from services.pool.errors import WorkerStartError
from services.pool.ipc import (
    Assign,
    Busy,
    Idle,
    Ready,
    Released,
    Stop,
    WorkerConfig,
    Yield,
)
from services.pool.lease import PIDNS, Lease, LeaseStore, owner_gone
from services.pool.process import WorkerProcess
from services.pool.recovery import recover
from services.pool.settings import PoolSettings

log = logging.getLogger(__name__)

FETCH_WAIT_S = 1.0
PRESSURE_CHECK_S = 0.2
# With sessions waiting, a busy session keeps its worker at least this long, then
# gives it up after its current turn (round robin: it is woken again behind them).
FAIR_SHARE_S = 2.0
# An idle session keeps its worker this long before it is asked to yield to
# waiting sessions (a client's next prompt often follows its turn's end at
# once; yielding in that gap cost a hand-over per turn under load).
IDLE_GRACE_S = 0.5
# How long the pool remembers a session's re-wake (to drop older wake-ups).
REQUEUED_TTL_S = 120.0


class WarmPool:
    """Keeps ``pool_workers`` children warm and gives them sessions."""

    def __init__(
        self,
        settings: PoolSettings,
        *,
        js: JetStreamContext,
        log_: JetStreamLog,
        leases: LeaseStore,
        assignments: KeyValue,
        wake: JetStreamContext.PullSubscription,
        host: str,
    ) -> None:
        self.settings = settings
        self.names = BusNames(settings.bus_prefix)
        self.pool_id = new_id("pool")
        self.host = host
        self._js = js
        self._log = log_
        self._leases = leases
        self._assignments = assignments
        self._wake = wake
        # Sessions released with a re-wake queued: id → (its seq, when noted).
        self._requeued: dict[str, tuple[int, float]] = {}
        self._workers: dict[str, WorkerProcess] = {}
        self._idle: asyncio.Queue[WorkerProcess] = asyncio.Queue()
        self._changed = asyncio.Event()
        self._stopping = False
        self._starved = False
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def workers(self) -> list[WorkerProcess]:
        """Live children (busy or idle)."""
        return list(self._workers.values())

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop``; then let workers finish their turns and exit."""
        try:
            async with asyncio.TaskGroup() as group:
                warm = group.create_task(self._keep_warm())
                dispatch = group.create_task(self._dispatch())
                sweep = group.create_task(self._sweep())
                pressure = group.create_task(self._pressure())
                await stop.wait()
                self._stopping = True
                for task in (warm, dispatch, sweep, pressure):
                    task.cancel()
        finally:
            await self._shutdown()

    # --- workers ----------------------------------------------------------------------

    async def _keep_warm(self) -> None:
        while not cancel_requested():
            while len(self._workers) < self.settings.pool_workers:
                await self._start_worker()
            self._changed.clear()
            await self._changed.wait()

    async def _start_worker(self) -> WorkerProcess:
        config = WorkerConfig(
            worker_id=new_id("w"), host=self.host, settings=self.settings
        )
        worker = await WorkerProcess.spawn(config)
        self._workers[worker.worker_id] = worker
        # A worker that never says Ready (hung import, NATS unreachable) is
        # replaced rather than left holding a place in the pool.
        asyncio.get_running_loop().call_later(
            self.settings.pool_worker_start_timeout_s, self._kill_if_unready, worker
        )
        task = asyncio.create_task(self._supervise(worker))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return worker

    @staticmethod
    def _kill_if_unready(worker: WorkerProcess) -> None:
        if not worker.ready and worker.alive:
            log.error("%s", WorkerStartError(worker.worker_id, "not ready in time"))
            worker.kill()

    async def _supervise(self, worker: WorkerProcess) -> None:
        try:
            async for msg in worker.messages():
                if isinstance(msg, Ready):
                    worker.ready = True
                    self._idle.put_nowait(worker)
                elif isinstance(msg, Released):
                    await self._released(worker, msg)
                elif isinstance(msg, Idle):
                    worker.idle_since = worker.idle_since or time.monotonic()
                elif isinstance(msg, Busy):
                    worker.idle_since = None
                    worker.yield_sent = False
            worker.exited = True
            if not worker.ready:
                log.error("%s", WorkerStartError(worker.worker_id, "exited"))
                await asyncio.sleep(0.5)  # no hot loop when workers cannot start
            # Refill first: the replacement imports while the session is recovered.
            self._workers.pop(worker.worker_id, None)
            self._changed.set()
            await self._lost(worker)
            await worker.wait()
        except Exception:
            log.exception("supervising %s failed", worker.worker_id)
            worker.kill()
        finally:
            self._workers.pop(worker.worker_id, None)
            self._changed.set()

    async def _released(self, worker: WorkerProcess, msg: Released) -> None:
        if msg.rewake_seq:
            self._note_requeued(msg.session_id, msg.rewake_seq)
        held = worker.take_session()
        if held is not None:
            await self._record(worker, held.lease.session_id, "", "released")
        log.info("%s released %s (%s)", worker.worker_id, msg.session_id, msg.reason)
        if not self._stopping:
            self._idle.put_nowait(worker)

    def _note_requeued(self, session_id: str, seq: int) -> None:
        """Remember the re-wake a release queued: it covers older wake-ups."""
        now = time.time()
        old = now - REQUEUED_TTL_S
        self._requeued = {s: v for s, v in self._requeued.items() if v[1] > old}
        self._requeued[session_id] = (seq, now)

    def _superseded(self, session_id: str, seq: int, stored_at: float) -> bool:
        """A wake-up older than the re-wake its session's release queued.

        Round robin: a session that gave its worker way was re-woken at the
        tail of the queue; its older wake-ups (queued while it was served)
        must not put it first again. They are dropped, not nak'd with a
        delay: JetStream redelivers nak'd messages before undelivered ones,
        so held-back sessions kept jumping ahead of waiting ones (prompts
        starved for over 60 s in the chaos run). Older means a lower seq *and*
        stored before the release was noted, so a wake stream re-created
        meanwhile (seqs from 1 again) drops nothing new.
        """
        requeued = self._requeued.get(session_id)
        if requeued is None:
            return False
        if seq < requeued[0] and stored_at < requeued[1]:
            return True
        del self._requeued[session_id]
        return False

    async def _lost(self, worker: WorkerProcess) -> None:
        """Recover the session a dead worker held (whoever sees the death first)."""
        held = worker.take_session()
        if held is None or self._stopping:
            return
        log.warning("%s exited holding %s", worker.worker_id, held.lease.session_id)
        current = await self._leases.get(held.lease.session_id)
        if current is None or current.lease.worker_id != worker.worker_id:
            return
        await self._record(worker, held.lease.session_id, "", "released")
        recoverer = self._lease("", held.lease.session_id, 0)
        await recover(self._log, self._leases, self._js, current, recoverer)

    def _lease(self, worker_id: str, session_id: str, pid: int) -> Lease:
        now = time.time()
        return Lease(
            session_id=session_id,
            worker_id=worker_id or f"pool:{self.pool_id}",
            pool_id=self.pool_id,
            host=self.host,
            pid=pid,
            expires_at=now,
            acquired_at=now,
            pidns=PIDNS,
        )

    async def _record(
        self, worker: WorkerProcess, session_id: str, token: str, state: str
    ) -> None:
        digest = hashlib.sha256(token.encode()).hexdigest() if token else ""
        record = Assignment(
            worker_id=worker.worker_id,
            session_id=session_id,
            token_sha256=digest,
            assigned_at=now_rfc3339(),
            state="assigned" if state == "assigned" else "released",
            host=self.host,
            pid=worker.pid,
        )
        await self._assignments.put(worker.worker_id, msgspec.json.encode(record))

    # --- wake-ups ---------------------------------------------------------------------

    async def _dispatch(self) -> None:
        while not self._stopping and not cancel_requested():
            self._starved = self._idle.empty()
            worker = await self._idle.get()
            self._starved = False
            while worker.alive and worker.held is None and not self._stopping:
                msg = await self._next_wake()
                if msg is None:
                    continue
                try:
                    await self._offer(worker, msg)
                except Exception:
                    log.exception("wake-up %s failed", msg.subject)
                    await msg.nak(delay=1.0)

    async def _next_wake(self) -> Msg | None:
        try:
            msgs = await self._wake.fetch(1, timeout=FETCH_WAIT_S)
        except TimeoutError:
            raise_if_cancelled()
            return None
        except nats.errors.Error as exc:
            # NATS is restarting: wake-ups wait in their stream meanwhile.
            log.warning("pulling wake-ups failed: %r", exc)
            await asyncio.sleep(FETCH_WAIT_S)
            return None
        return msgs[0] if msgs else None

    async def _offer(self, worker: WorkerProcess, msg: Msg) -> None:
        """Give the woken session to ``worker`` unless someone owns it already."""
        sid = self.names.session_of_subject(msg.subject)
        md = msg.metadata
        if self._superseded(sid, md.sequence.stream, md.timestamp.timestamp()):
            await msg.ack()  # its re-wake, behind the waiting sessions, serves it
            return
        held = await self._leases.acquire(
            self._lease(worker.worker_id, sid, worker.pid)
        )
        if held is None:
            await msg.ack()  # its owner follows the log and will serve it
            return
        token = secrets.token_urlsafe(32)
        await self._record(worker, sid, token, "assigned")
        worker.held = held
        worker.held_since = time.monotonic()
        # Idle/yield state was about the previous session: not yieldable yet.
        worker.idle_since = None
        worker.yield_sent = False
        await worker.send(Assign(lease=held.lease, revision=held.revision, token=token))
        await msg.ack()
        if worker.exited:
            # It died between the pull and the hand-over: its supervisor may have
            # looked already, so recover here too (only one of us gets the lease).
            await self._lost(worker)

    async def _pressure(self) -> None:
        """Sessions wait and no worker is free: ask the longest-idle one to yield.

        T1 is how long an idle session keeps its worker when nobody else needs
        it; with wake-ups waiting, an idle session gives its worker up after
        ``IDLE_GRACE_S`` (it is picked up again, by any worker, at its next
        prompt), a busy one after its current turn once it had ``FAIR_SHARE_S``.
        """
        while not cancel_requested():
            await asyncio.sleep(PRESSURE_CHECK_S)
            if not self._starved:
                continue
            now = time.monotonic()
            candidates = [w for w in self._workers.values() if _may_yield(w, now)]
            if not candidates or not await self._wakeups_waiting():
                continue
            worker = min(candidates, key=_yield_order)
            worker.yield_sent = True
            await worker.send(Yield())

    async def _wakeups_waiting(self) -> bool:
        """Wake-ups of sessions none of our workers holds wait in the stream.

        A held session's own wake-ups (its next prompts: its worker follows the
        log and serves them) stay there until an idle worker acks them; they
        are not sessions waiting, and yielding to them cost the busy session
        its worker and a 2 s hold-back at every fair share.
        """
        try:
            info = await self._wake.consumer_info()
            if not info.num_pending:
                return False
            held = {w.held.lease.session_id for w in self._workers.values() if w.held}
            if not held:
                return True
            stream = await self._js.stream_info(
                self.names.wake_stream, subjects_filter=">"
            )
        except (TimeoutError, nats.errors.Error):
            raise_if_cancelled()
            return False
        subjects = stream.state.subjects or {}
        return any(self.names.session_of_subject(s) not in held for s in subjects)

    def _owner_dead(self, lease: Lease) -> bool:
        # Another pool's worker on this host that is gone (ours: ``_lost``).
        return lease.pool_id != self.pool_id and owner_gone(lease, self.host)

    async def _sweep(self) -> None:
        while not cancel_requested():
            try:
                for held in await self._leases.expired(self._owner_dead):
                    await recover(
                        self._log,
                        self._leases,
                        self._js,
                        held,
                        self._lease("", held.lease.session_id, 0),
                    )
            except Exception:
                log.exception("lease sweep failed")
            await asyncio.sleep(max(self.settings.pool_lease_ttl_s / 2, 0.2))

    # --- stop -------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        workers = list(self._workers.values())
        for worker in workers:
            await worker.send(Stop(grace_s=self.settings.pool_drain_s))
        try:
            async with asyncio.timeout(self.settings.pool_drain_s + 5):
                await asyncio.gather(*(w.wait() for w in workers))
        except TimeoutError:
            for worker in workers:
                worker.kill()
        for exc in await cancel_all(list(self._tasks)):
            log.warning("pool task ended with %r", exc)


def _may_yield(worker: WorkerProcess, now: float) -> bool:
    """Idle, or busy for longer than its fair share (and not asked already)."""
    if worker.held is None or worker.yield_sent:
        return False
    if worker.idle_since is not None:
        return now - worker.idle_since >= IDLE_GRACE_S
    return now - (worker.held_since or now) >= FAIR_SHARE_S


def _yield_order(worker: WorkerProcess) -> tuple[int, float]:
    """The longest-idle worker first, then the one holding its session longest."""
    if worker.idle_since is not None:
        return (0, worker.idle_since)
    return (1, worker.held_since or 0.0)
