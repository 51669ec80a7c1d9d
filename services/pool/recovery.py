"""Recover a session whose worker died: end its turn, free it, wake it again.

Used by the pool when one of its children exits while it holds a session, and
by every pool's sweeper for leases that expired (a pool killed whole). The
recoverer first takes the lease by CAS, so it never races a new owner; a turn
that was waiting only for a person stays open (the next worker goes on with it).
"""

from __future__ import annotations

import logging

from nats.js import JetStreamContext

from eventstore.log import JetStreamLog
from schemas.events import TurnEnded, WorkerAssigned, WorkerReleased
from services.pool.bus import rewake
from services.pool.conversation import Conversation
from services.pool.lease import Held, Lease, LeaseStore

log = logging.getLogger(__name__)


async def recover(
    log_: JetStreamLog,
    leases: LeaseStore,
    js: JetStreamContext,
    held: Held,
    recoverer: Lease,
) -> bool:
    """Recover one session from a dead owner; False if someone else got there."""
    mine = await leases.take(held, recoverer)
    if mine is None:
        return False
    sid, dead = held.lease.session_id, held.lease.worker_id
    actor = f"pool:{recoverer.pool_id}"
    conv, owner_assigned = await _fold(log_, sid, dead)
    turn = conv.turn
    if turn is not None and not conv.resumable():
        ended = await log_.append(
            sid,
            TurnEnded(
                turn_id=turn.turn_id,
                stop_reason="worker_lost",
                message=f"worker {dead} stopped mid-turn",
            ),
            actor=actor,
        )
        conv.apply(ended.event())
    if owner_assigned:
        released = WorkerReleased(worker_id=dead, reason="worker_lost")
        await log_.append(sid, released, actor=actor)
    await leases.release(mine)
    # A turn waiting for a person is woken by the answer's own wake-up.
    if conv.needs_worker():
        await rewake(js, log_.names, sid, f"recover-{sid}-{mine.revision}")
    log.warning("recovered %s from %s", sid, dead)
    return True


async def _fold(
    log_: JetStreamLog, session_id: str, worker_id: str
) -> tuple[Conversation, bool]:
    """The conversation, and whether ``worker_id`` is assigned (not released)."""
    conv = Conversation()
    assigned = False
    for stored in await log_.read(session_id):
        event = stored.event()
        conv.apply(event)
        if isinstance(event.data, WorkerAssigned | WorkerReleased):
            assigned = (
                isinstance(event.data, WorkerAssigned)
                and event.data.worker_id == worker_id
            )
    return conv, assigned
