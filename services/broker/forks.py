"""Forks: which workspace save belongs to which turn end, and seeding a fork.

Every turn-end save is indexed by the ``turn.ended`` seq that asked for it:
an object ``<sid>/t<seq>`` in the archive store holding the manifest's name
(the manifest itself may be shared by several turn ends when nothing changed).
A fork asks for the latest index at or before ``at_seq`` and starts the new
session's record ``archived`` with that manifest: its first bind rebuilds the
sandbox from it. Nothing is copied: the fork's manifests name the parent's
layers, and its own saves add layers under its own prefix.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from schemas.broker import ForkReply, ForkRequest
from schemas.names import BusNames
from services.broker.archive import ArchiveStore
from services.broker.archive_refs import note_fork
from services.broker.records import KvRecordStore, SandboxRecord
from services.common.request import answering

log = logging.getLogger(__name__)
INDEX = "t"
_request = msgspec.json.Decoder(ForkRequest)
Spawn = Callable[[Callable[[Msg], Awaitable[None]]], Callable[[Msg], Awaitable[None]]]


def index_name(session_id: str, turn_seq: int) -> str:
    """The index object of the save taken at the ``turn.ended`` of ``turn_seq``."""
    return f"{session_id}/{INDEX}{turn_seq:010d}"


async def record_turn_save(
    store: ArchiveStore, session_id: str, turn_seq: int, manifest: str
) -> None:
    """Note that ``manifest`` is the workspace as of ``turn_seq``."""
    await store.put(index_name(session_id, turn_seq), io.BytesIO(manifest.encode()))


async def save_at(
    store: ArchiveStore, session_id: str, at_seq: int
) -> tuple[str, int] | None:
    """The latest turn-end save at or before ``at_seq``: (manifest, turn seq)."""
    prefix = f"{session_id}/{INDEX}"
    seqs = []
    for name in await store.names(prefix):
        tail = name[len(prefix) :]
        if tail.isdigit() and int(tail) <= at_seq:
            seqs.append(int(tail))
    if not seqs:
        return None
    turn_seq = max(seqs)
    sink = io.BytesIO()
    await store.get(index_name(session_id, turn_seq), sink)
    return sink.getvalue().decode(), turn_seq


class ForkServer:
    """Answers ``<prefix>.broker.fork``: seed a new session from a parent's save."""

    def __init__(
        self,
        store: ArchiveStore,
        records: KvRecordStore,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.records = records
        self.clock = clock
        self._nc: Client | None = None

    async def subscribe(
        self, nc: Client, names: BusNames, queue: str, spawn: Spawn
    ) -> Subscription:
        """The fork handler in the replicas' queue group."""
        self._nc = nc
        return await nc.subscribe(names.broker_fork, queue, cb=spawn(self._on_fork))

    async def _on_fork(self, msg: Msg) -> None:
        assert self._nc is not None
        try:
            async with answering(self._nc, msg):
                reply = await self.fork(_request.decode(msg.data))
        except msgspec.ValidationError as exc:
            reply = ForkReply(ok=False, error=f"bad fork request: {exc}")
        except Exception:
            log.exception("fork failed")
            reply = ForkReply(ok=False, error="the broker failed; try again")
        await msg.respond(msgspec.json.encode(reply))

    async def fork(self, req: ForkRequest) -> ForkReply:
        """Seed ``req.session_id`` (idempotent: a record already there stays)."""
        found = await save_at(self.store, req.parent_session_id, req.at_seq)
        if found is None:
            return ForkReply()
        manifest, turn_seq = found
        now = self.clock()

        def seed(rec: SandboxRecord) -> SandboxRecord | None:
            if rec.state != "none":
                return None  # a retried request: already seeded (or in use)
            return SandboxRecord(
                session_id=req.session_id,
                state="archived",
                last_archive=manifest,
                archived_at=now,
                last_active=now,
                dirty=False,
                reason=f"forked from {req.parent_session_id} at seq {req.at_seq}",
            )

        # Marked before the record names it: the parent's forget keeps it.
        await note_fork(self.store, manifest, req.session_id)
        await self.records.change(req.session_id, seed)
        return ForkReply(manifest=manifest, turn_seq=turn_seq)
