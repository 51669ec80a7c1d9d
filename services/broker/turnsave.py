"""A turn's workspace save, taken before its ``turn.ended`` is appended.

The log follower used to save on ``turn.ended``; a next turn that started
first could get its early changes into that save. Now the worker asks
``<prefix>.broker.ctl.save`` (its NATS permissions already cover
``broker.ctl``) just before it appends ``turn.ended``, and the next turn cannot
start before that event exists: the save holds exactly the state at the
turn's end. The broker notes the manifest as ``<sid>/u<turn id>``; the
follower, on that ``turn.ended``, indexes it under the event's seq (for
forks) instead of saving again. A turn end without a note (appended by
recovery, or by a worker whose request failed) is saved when the follower
sees it, as before.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Awaitable, Callable

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from schemas.broker import Assignment, SaveReply, SaveRequest
from schemas.names import BusNames
from services.broker.archive import ArchiveLimitError, ArchiveStore
from services.broker.errors import SandboxError
from services.broker.reaper import Reaper
from services.common.request import answering
from services.envd import EnvdError

log = logging.getLogger(__name__)
PENDING = "u"
_request = msgspec.json.Decoder(SaveRequest)
_assignment = msgspec.json.Decoder(Assignment)
Spawn = Callable[[Callable[[Msg], Awaitable[None]]], Callable[[Msg], Awaitable[None]]]


def pending_name(session_id: str, turn_id: str) -> str:
    """The note of the save taken for ``turn_id``'s end."""
    return f"{session_id}/{PENDING}{turn_id}"


async def pending_save(store: ArchiveStore, session_id: str, turn_id: str) -> str:
    """The manifest saved for ``turn_id``'s end, "" when none was."""
    sink = io.BytesIO()
    try:
        await store.get(pending_name(session_id, turn_id), sink)
    except KeyError:
        return ""
    return sink.getvalue().decode()


class TurnSaves:
    """Answers ``<prefix>.broker.ctl.save`` for the worker assigned the session."""

    def __init__(self, reaper: Reaper, store: ArchiveStore, assign: KeyValue) -> None:
        self.reaper = reaper
        self.store = store
        self.assignments = assign
        self._nc: Client | None = None

    async def subscribe(
        self, nc: Client, names: BusNames, queue: str, spawn: Spawn
    ) -> Subscription:
        """The save handler in the replicas' queue group."""
        self._nc = nc
        return await nc.subscribe(names.broker_save, queue, cb=spawn(self._on_save))

    async def _on_save(self, msg: Msg) -> None:
        assert self._nc is not None
        try:
            async with answering(self._nc, msg):
                reply = await self.save(_request.decode(msg.data))
        except msgspec.ValidationError as exc:
            reply = SaveReply(ok=False, error=f"bad save request: {exc}")
        except (SandboxError, EnvdError) as exc:  # the follower saves instead
            reply = SaveReply(ok=False, error=f"save failed: {exc}")
        except Exception:
            log.exception("turn save failed")
            reply = SaveReply(ok=False, error="the broker failed")
        await msg.respond(msgspec.json.encode(reply))

    async def save(self, req: SaveRequest) -> SaveReply:
        """Save ``req.session_id``'s workspace and note it for ``req.turn_id``."""
        if not await self._assigned(req.worker_id, req.session_id):
            return SaveReply(ok=False, error="worker not assigned to the session")
        try:
            manifest = await self.reaper.save(req.session_id)
        except ArchiveLimitError as exc:
            return SaveReply(ok=False, error=str(exc))
        if manifest is None:  # not running: its last save is its state
            got = await self.reaper.life.store.get(req.session_id)
            manifest = got.record.last_archive
        if manifest:
            body = io.BytesIO(manifest.encode())
            await self.store.put(pending_name(req.session_id, req.turn_id), body)
        return SaveReply(manifest=manifest or "")

    async def _assigned(self, worker_id: str, session_id: str) -> bool:
        try:
            entry = await self.assignments.get(worker_id)
        except KeyNotFoundError:
            return False
        try:
            record = _assignment.decode(entry.value or b"")
        except msgspec.DecodeError:
            return False
        return record.session_id == session_id and record.state == "assigned"
