"""Follow the session log: turn ends save the workspace, closes delete the sandbox.

A durable pull consumer shared by every replica: each event goes to one of
them, is acked after its action, and is redelivered if that replica dies.
"""

from __future__ import annotations

import asyncio
import logging

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from schemas.events import SessionClosed, TurnEnded
from schemas.names import BusNames
from services.broker.archive import ArchiveLimitError, Archiver
from services.broker.errors import SandboxError
from services.broker.forks import record_turn_save
from services.broker.reaper import Reaper
from services.broker.turnsave import pending_name, pending_save
from services.envd import EnvdError

log = logging.getLogger(__name__)
DURABLE = "broker"
TYPES = (TurnEnded.TYPE, SessionClosed.TYPE)


async def _consumer(nc: Client, names: BusNames, stop: asyncio.Event) -> object:
    js = nc.jetstream()
    config = ConsumerConfig(
        durable_name=DURABLE,
        filter_subjects=[names.log_type(t) for t in TYPES],
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.NEW,
        ack_wait=120,
        max_deliver=20,
    )
    while not stop.is_set():
        try:
            await js.add_consumer(names.log_stream, config)
            return await js.pull_subscribe_bind(DURABLE, names.log_stream)
        except NotFoundError:
            log.info("log stream %s not there yet; waiting", names.log_stream)
            await asyncio.sleep(1.0)
    return None


async def follow_log(
    nc: Client, names: BusNames, reaper: Reaper, stop: asyncio.Event
) -> None:
    """Act on ``turn.ended`` and ``session.closed`` until ``stop``."""
    sub = await _consumer(nc, names, stop)
    if sub is None:
        return
    try:
        while not stop.is_set():
            try:
                msgs = await sub.fetch(16, timeout=1.0)  # type: ignore[attr-defined]
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            for msg in msgs:
                await _handle(msg, names, reaper)
    finally:
        # A pull subscription left open makes nc.drain() wait for its timeout.
        await sub.unsubscribe()  # type: ignore[attr-defined]


class _TurnId(msgspec.Struct):
    turn_id: str = ""


class _Ended(msgspec.Struct):
    seq: int
    data: _TurnId = msgspec.field(default_factory=_TurnId)


async def _save(reaper: Reaper, sid: str, msg: Msg) -> None:
    """Index the turn's save under the turn end's seq (for forks).

    The save the worker asked for before appending ``turn.ended``
    (:mod:`turnsave`) when there is one; else one taken now.
    """
    ended = msgspec.json.decode(msg.data, type=_Ended)
    workspace = reaper.life.workspace
    store = workspace.store if isinstance(workspace, Archiver) else None
    manifest = ""
    if store is not None and ended.data.turn_id:
        manifest = await pending_save(store, sid, ended.data.turn_id)
    if not manifest:
        manifest = await reaper.save(sid) or ""
    if not manifest:  # not running: the last save is still the state
        manifest = (await reaper.life.store.get(sid)).record.last_archive or ""
    if manifest and store is not None:
        await record_turn_save(store, sid, ended.seq, manifest)
        if ended.data.turn_id:
            await store.delete(pending_name(sid, ended.data.turn_id))


async def _handle(msg: Msg, names: BusNames, reaper: Reaper) -> None:
    sid = names.session_of_subject(msg.subject)
    kind = msg.subject.rsplit(".", 2)[-2:]
    event_type = ".".join(kind)
    try:
        if event_type == SessionClosed.TYPE:
            await reaper.delete(sid, "session closed")
        else:
            await _save(reaper, sid, msg)
        await msg.ack()
    except ArchiveLimitError as exc:
        # The same save would hit the same limit: not retried.
        log.error("%s of %s: %s", event_type, sid, exc)
        await msg.ack()
    except (SandboxError, EnvdError) as exc:
        log.warning("%s of %s: %s; retrying later", event_type, sid, exc)
        await msg.nak(delay=2.0)
    except Exception:
        log.exception(
            "%s of %s failed (seq %s)", event_type, sid, msg.metadata.sequence
        )
        await msg.nak(delay=5.0)
