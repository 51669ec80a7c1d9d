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
    sid = held.lease.session_id
    actor = f"pool:{recoverer.pool_id}"
    conv = Conversation()
    owner_assigned = False
    for stored in await log_.read(sid):
        event = stored.event()
        conv.apply(event)
        if isinstance(event.data, WorkerAssigned | WorkerReleased):
            owner_assigned = (
                isinstance(event.data, WorkerAssigned)
                and event.data.worker_id == held.lease.worker_id
            )
    lost = conv.turn is not None and not conv.resumable()
    if conv.turn is not None and lost:
        ended = await log_.append(
            sid,
            TurnEnded(
                turn_id=conv.turn.turn_id,
                stop_reason="worker_lost",
                message=f"worker {held.lease.worker_id} stopped mid-turn",
            ),
            actor=actor,
        )
        conv.apply(ended.event())
    if owner_assigned:
        await log_.append(
            sid,
            WorkerReleased(worker_id=held.lease.worker_id, reason="worker_lost"),
            actor=actor,
        )
    await leases.release(mine)
    # A turn waiting for a person is woken by the answer's own wake-up.
    if conv.needs_worker():
        await rewake(js, log_.names, sid, f"recover-{sid}-{mine.revision}")
    log.warning("recovered %s from %s", sid, held.lease.worker_id)
    return True
