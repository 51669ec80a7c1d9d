"""A worker serving one session: fold, follow the log, run turns, release.

Turns run one at a time in the order of their prompts' seqs. The log is the only
input: prompts, cancels, answers and closes arrive through one tail, folded in
seq order by the same code that rebuilt the conversation at the start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import nats.errors

from eventstore.log import StoredEvent
from schemas.events import (
    Event,
    OptionKind,
    Payload,
    SessionClosed,
    StopReason,
    TurnCancelRequested,
    TurnEnded,
    WorkerAssigned,
    WorkerReleased,
)
from services.pool.agent import Turn
from services.pool.bus import rewake
from services.pool.cancellation import cancel_requested, raise_if_cancelled
from services.pool.context import WorkerContext
from services.pool.conversation import Conversation
from services.pool.errors import ParkedError
from services.pool.lease import Held
from services.pool.sandbox import SandboxBinding

log = logging.getLogger(__name__)


class SessionRunner:
    """Owns one session while this worker holds its lease."""

    def __init__(
        self,
        ctx: WorkerContext,
        held: Held,
        token: str,
        on_idle: Callable[[bool], None] = lambda idle: None,
    ) -> None:
        self.ctx = ctx
        self._on_idle = on_idle
        self.settings = ctx.settings
        self.model = ctx.model
        self.session_id = held.lease.session_id
        self.held = held
        self.conv = Conversation()
        self.binding = SandboxBinding(
            ctx.nc,
            ctx.names,
            worker_id=ctx.worker_id,
            session_id=self.session_id,
            token=token,
            activity_interval_s=ctx.settings.pool_activity_interval_s,
            bind_retry_s=ctx.settings.pool_tool_retry_window_s,
        )
        self._changed = asyncio.Condition()
        self._turn_id: str | None = None
        self._turn_task: asyncio.Task[tuple[StopReason, str]] | None = None
        self._cancel_reason: StopReason | None = None
        self._stop_reason: str | None = None
        self._snapshot_seq = 0
        self._waiting_answer = False
        self._park = False
        self._yield_after_turn = False
        # Wake stream seq of the re-wake queued at the release (0: none).
        self.rewake_seq = 0

    # --- the port a Turn uses ---------------------------------------------------------

    async def append(self, payload: Payload) -> StoredEvent:
        """Append as this worker."""
        return await self.ctx.log.append(self.session_id, payload, actor=self.ctx.actor)

    async def caught_up(self, seq: int) -> None:
        """Wait until the fold has applied ``seq`` (our own appends come back too)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.conv.last_seq >= seq)

    async def answer(self, request_id: str) -> OptionKind:
        """Wait for the answer to a permission request; it is in the log.

        Unanswered after T1, or asked to yield meanwhile, the turn is parked
        (:class:`ParkedError`): the session is released, still open, and its
        answer wakes it again on any worker.
        """

        def answered() -> bool:
            turn = self.conv.turn
            return turn is not None and request_id in turn.answers

        self._waiting_answer = True
        self._on_idle(True)
        try:
            async with asyncio.timeout(self.settings.pool_idle_release_s):
                async with self._changed:
                    await self._changed.wait_for(lambda: answered() or self._park)
        except TimeoutError:
            pass
        finally:
            self._waiting_answer = False
            self._on_idle(False)
        if not answered():
            raise ParkedError(request_id)
        assert self.conv.turn is not None
        return self.conv.turn.answers[request_id]

    # --- the session ------------------------------------------------------------------

    async def run(self) -> str:
        """Serve the session until idle, closed or stopped; returns why it ended."""
        async with asyncio.TaskGroup() as group:
            # Renew from the start: folding a long log may outlast a TTL.
            beat = group.create_task(self._heartbeat())
            try:
                reason = await self._serve(group)
            finally:
                beat.cancel()
                await self.binding.close()
        return await self._release(reason, quiet=reason == "no_work")

    async def _serve(self, group: asyncio.TaskGroup) -> str:
        self.conv, self._snapshot_seq = await self.ctx.snapshots.fold(
            self.ctx.log, self.session_id
        )
        if not self.conv.needs_worker():
            return "no_work"
        stored = await self.append(
            WorkerAssigned(
                worker_id=self.ctx.worker_id, host=self.ctx.host, pid=self.ctx.pid
            )
        )
        last = await self._end_lost_turn() or stored.seq
        tail = group.create_task(self._tail())
        try:
            # Our own first appends come back through the tail, in seq order
            # with anything a device appended meanwhile.
            await self.caught_up(last)
            return await self._drive()
        finally:
            tail.cancel()

    async def _end_lost_turn(self) -> int | None:
        turn = self.conv.turn
        if turn is None or self.conv.resumable():
            return None
        stored = await self.append(
            TurnEnded(
                turn_id=turn.turn_id,
                stop_reason="worker_lost",
                message="the worker running this turn stopped",
            )
        )
        return stored.seq

    async def stop(self, grace_s: float) -> None:
        """Finish the running turn (up to ``grace_s``), then release."""
        async with self._changed:
            self._stop_reason = self._stop_reason or "pool_stopping"
            # A turn waiting for a person is parked, not lost.
            self._park = self._waiting_answer
            self._changed.notify_all()
        if self._turn_task is not None:
            asyncio.get_running_loop().call_later(grace_s, self._cancel, "worker_lost")

    def _cancel(self, reason: StopReason) -> None:
        task = self._turn_task
        if task is not None and not task.done():
            self._cancel_reason = self._cancel_reason or reason
            task.cancel()

    async def _tail(self) -> None:
        async for stored in self.ctx.log.tail(self.session_id, self.conv.last_seq):
            event = stored.event()
            async with self._changed:
                self.conv.apply(event)
                self._react(event)
                self._changed.notify_all()

    def _react(self, event: Event) -> None:
        match event.data:
            case TurnCancelRequested() if event.data.turn_id == self._turn_id:
                self._cancel("cancelled")
            case SessionClosed():
                self._stop_reason = "closed"
                self._cancel("cancelled")

    async def _heartbeat(self) -> None:
        while not cancel_requested():
            await asyncio.sleep(self.ctx.leases.ttl_s / 3)
            try:
                self.held = await self.ctx.leases.renew(self.held)
            except (TimeoutError, nats.errors.Error) as exc:
                raise_if_cancelled()
                # Transient (NATS restarting): try again; LeaseLostError is not.
                log.warning("renewing the lease of %s failed: %r", self.session_id, exc)

    async def give_way(self) -> None:
        """Others need a worker: release now if nothing runs, else after this turn.

        Idle means no turn and no prompt waiting, or a turn waiting for a person.
        A busy session finishes its turn, then releases; its next prompt wakes
        it again behind the sessions that were waiting (round robin).
        """
        async with self._changed:
            if self._waiting_answer:
                self._park = True
            elif self._turn_task is None and not self.conv.has_work:
                self._stop_reason = self._stop_reason or "yield"
            else:
                self._yield_after_turn = True
            self._changed.notify_all()

    async def _drive(self) -> str:
        while True:
            self._on_idle(not self.conv.has_work)
            try:
                async with asyncio.timeout(self.settings.pool_idle_release_s):
                    async with self._changed:
                        await self._changed.wait_for(
                            lambda: self._stop_reason is not None or self.conv.has_work
                        )
            except TimeoutError:
                return "idle"
            if self._stop_reason is not None:
                return self._stop_reason
            self._on_idle(False)
            await self._next_turn()
            if self._yield_after_turn and self._stop_reason is None:
                return "gave_way"

    async def _next_turn(self) -> None:
        resume = self.conv.turn is not None
        if self.conv.turn is not None:
            turn = Turn(self, self.conv.turn.turn_id)
        else:
            prompt = self.conv.queue[0]
            turn = Turn(self, prompt.turn_id)
            if prompt.turn_id in self.conv.cancelled:
                await turn.finish("cancelled", "cancelled before it started")
                await self.caught_up(turn.last_seq)
                return
            await turn.start(prompt.seq)
        self.binding.mark_stale()
        ended = await self._body(turn, resume)
        if ended is None:
            # Parked: the turn stays open in the log, waiting for its answer.
            self._stop_reason = self._stop_reason or "awaiting_permission"
            return
        await turn.finish(*ended)
        await self.caught_up(turn.last_seq)

    async def _body(self, turn: Turn, resume: bool) -> tuple[StopReason, str] | None:
        self._turn_id = turn.turn_id
        task = asyncio.create_task(turn.steps(resume))
        self._turn_task = task
        if turn.turn_id in self.conv.cancelled or self._stop_reason == "closed":
            self._cancel("cancelled")
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return self._cancel_reason or "cancelled", ""
        except ParkedError:
            return None
        except Exception as exc:
            log.exception("turn %s of %s failed", turn.turn_id, self.session_id)
            return "error", f"internal error: {exc!r}"
        finally:
            self._turn_task = None
            self._turn_id = None
            self._cancel_reason = None

    async def _release(self, reason: str, *, quiet: bool = False) -> str:
        if not quiet:
            await self.append(
                WorkerReleased(worker_id=self.ctx.worker_id, reason=reason)
            )
        if not await self.ctx.leases.release(self.held) or reason == "closed":
            return reason
        # A prompt that raced this release had its wake-up dropped while we held
        # the lease: look once more, now that the lease is gone.
        for stored in await self.ctx.log.read(self.session_id, self.conv.last_seq):
            self.conv.apply(stored.event())
        await self.ctx.snapshots.maybe_save(
            self.ctx.log, self.session_id, self.conv, self._snapshot_seq
        )
        if self.conv.needs_worker():
            key = f"rewake-{self.session_id}-{self.conv.last_seq}"
            self.rewake_seq = await rewake(
                self.ctx.js, self.ctx.names, self.session_id, key
            )
        return reason
