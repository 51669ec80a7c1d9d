"""The projector: copy every session log into SQLite and serve old ranges.

The process around it (settings, connection, signals) is ``services.projector``.

A durable pull consumer reads the whole log stream; each fetched batch is
written with its stream position in one SQLite transaction, then acked (ack
policy "all", one ack per batch). At start the consumer is re-created from the
position SQLite recorded, so SQLite, not the consumer, is the truth about what
was copied: a crash between commit and ack redelivers nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from eventstore.index import SessionIndex, SessionRecord
from eventstore.projection import Copied, DeadLetter, SqliteProjection
from eventstore.reader import SEQ_HEADER, TYPE_HEADER, ProjectorRange, ProjectorRead
from schemas.codec import EventDecodeError, decode_event
from schemas.events import SessionCreated
from schemas.names import BusNames

log = logging.getLogger(__name__)

_READ = msgspec.json.Decoder(ProjectorRead)
_ENC = msgspec.json.Encoder()
# Room left in a reply for the envelope around the events.
_REPLY_SLACK = 4096
# Pause after a failed fetch or write before trying again.
_RETRY_S = 0.2


def dead_letter_subject(names: BusNames) -> str:
    """Core subject on which the projector announces each dead-lettered message."""
    return names.projector_deadletter


def parse(msg: Msg, names: BusNames) -> Copied | DeadLetter:
    """One log message as an event to copy, or why it is not one of ours."""
    stream_seq = msg.metadata.sequence.stream
    try:
        event = decode_event(msg.data)
    except EventDecodeError as exc:
        return DeadLetter(stream_seq, msg.subject, f"undecodable: {exc}", msg.data)
    problem = _mismatch(msg, names, event.session_id, event.seq, event.type)
    if problem:
        return DeadLetter(stream_seq, msg.subject, problem, msg.data)
    return Copied(stream_seq, event, msg.data)


def _mismatch(msg: Msg, names: BusNames, session_id: str, seq: int, kind: str) -> str:
    """Why subject/headers disagree with the envelope ("" if they agree)."""
    expected = names.log_subject(session_id, seq, kind)
    if msg.subject != expected:
        return f"subject {msg.subject} does not match envelope ({expected})"
    hdrs = msg.headers or {}
    if hdrs.get(SEQ_HEADER, str(seq)) != str(seq):
        return f"header {SEQ_HEADER}={hdrs[SEQ_HEADER]} but envelope seq {seq}"
    if hdrs.get(TYPE_HEADER, kind) != kind:
        return f"header {TYPE_HEADER}={hdrs[TYPE_HEADER]} but envelope type {kind}"
    return ""


class Projector:
    """Consumer loop (log → SQLite) and request/reply server (SQLite → readers)."""

    def __init__(
        self,
        nc: Client,
        projection: SqliteProjection,
        reads: SqliteProjection,
        names: BusNames,
        *,
        batch: int = 256,
        index: SessionIndex | None = None,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._projection = projection
        self._reads = reads
        self._names = names
        self._batch = batch
        self._index = index
        self._sub: nats.js.JetStreamContext.PullSubscription | None = None
        # Consumer seq the next new delivery must have (a gap means a lost one).
        self._next = 1

    async def prepare(self) -> None:
        """(Re-)create the durable consumer from the position SQLite recorded."""
        await self.close()
        self._next = 1
        stream = self._names.log_stream
        position = await self._start_position(stream)
        durable = self._names.projector_durable
        with contextlib.suppress(NotFoundError):
            await self._js.delete_consumer(stream, durable)
        await self._js.add_consumer(
            stream,
            ConsumerConfig(
                durable_name=durable,
                ack_policy=AckPolicy.ALL,
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=position + 1,
                filter_subject=self._names.log_all,
                ack_wait=30.0,
                max_ack_pending=-1,
            ),
        )
        self._sub = await self._js.pull_subscribe_bind(durable=durable, stream=stream)

    async def _start_position(self, stream: str) -> int:
        """The position to go on from, checked against what the stream holds."""
        position = await self._projection.position(stream)
        info = await self._js.stream_info(stream)
        if info.state.last_seq < position:
            log.warning(
                "stream %s ends at %d before our position %d: re-created; copying anew",
                stream,
                info.state.last_seq,
                position,
            )
            await self._projection.reset_position(stream)
            position = 0
        if position + 1 < info.state.first_seq:
            log.error(
                "stream %s starts at %d: events %d..%d were purged before being copied",
                stream,
                info.state.first_seq,
                position + 1,
                info.state.first_seq - 1,
            )
        return position

    async def close(self) -> None:
        """Drop the pull subscription before the connection drains."""
        # Its queue of expired-fetch statuses would hold a drain for its timeout.
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def step(self, wait_s: float = 1.0) -> int:
        """Fetch and copy one batch; returns how many messages it held (0 if none)."""
        assert self._sub is not None, "prepare() first"
        try:
            msgs = await self._sub.fetch(self._batch, timeout=wait_s)
        except TimeoutError:
            return 0
        if not msgs:
            # nats-py 2.16 returns [] when a pull is answered by a status alone
            # (a 408 for an expired or superseded request): nothing to copy.
            return 0
        gap = self._gap([m.metadata.sequence.consumer for m in msgs])
        if gap is not None:
            # Deliveries were lost in transit (connection cut mid-fetch): their
            # redelivery would come after later events and, being below the
            # position, be skipped. Start again from what SQLite holds.
            log.warning("projector: deliveries %d..%d lost; resuming", *gap)
            await self.prepare()
            return 0
        items = [parse(m, self._names) for m in msgs]
        await self._reindex(items)
        upto = max(m.metadata.sequence.stream for m in msgs)
        await self._projection.apply(self._names.log_stream, items, upto)
        await msgs[-1].ack()
        await self._announce([i for i in items if isinstance(i, DeadLetter)])
        return len(msgs)

    def _gap(self, deliveries: list[int]) -> tuple[int, int] | None:
        """Consumer seqs this batch skipped, if any.

        Each delivery numbers up by one from 1 on a fresh consumer; a
        redelivery keeps its first number (below the next one expected).
        """
        for seq in deliveries:
            if seq > self._next:
                return self._next, seq - 1
            self._next = max(self._next, seq + 1)
        return None

    async def _reindex(self, items: list[Copied | DeadLetter]) -> None:
        """Re-put the index record of every ``session.created`` before committing.

        Before, not after: a crash in between redelivers the batch and puts again.
        """
        if self._index is None:
            return
        for item in items:
            if isinstance(item, Copied) and isinstance(item.event.data, SessionCreated):
                data = item.event.data
                await self._index.add(
                    SessionRecord(
                        session_id=item.event.session_id,
                        device_id=data.device_id,
                        title=data.title,
                        created_at=item.event.ts,
                        metadata=data.metadata,
                    )
                )

    async def _announce(self, dead: list[DeadLetter]) -> None:
        for item in dead:
            log.warning(
                "dead letter: stream seq %d subject %s: %s",
                item.stream_seq,
                item.subject,
                item.reason,
            )
            with contextlib.suppress(nats.errors.Error):
                await self._nc.publish(
                    dead_letter_subject(self._names),
                    item.data,
                    headers={
                        "Agentbus-Subject": item.subject,
                        "Agentbus-Stream-Seq": str(item.stream_seq),
                        "Agentbus-Reason": item.reason[:512],
                    },
                )

    async def consume(self, stop: asyncio.Event) -> None:
        """Copy batches until ``stop``; NATS restarts are waited out, not fatal."""
        while not stop.is_set():
            try:
                await self.step(wait_s=0.5)
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("projector fetch failed, retrying: %r", exc)
                await asyncio.sleep(_RETRY_S)

    async def serve(self, msg: Msg) -> None:
        """Answer one :class:`ProjectorRead` with a :class:`ProjectorRange`."""
        try:
            reply = await self._answer(msg.data)
        except Exception as exc:  # handler boundary: answer, keep serving
            log.exception("projector read failed: %r", msg.data[:200])
            reply = ProjectorRange(error=f"projector failed: {exc!r}")
        with contextlib.suppress(nats.errors.Error):
            await msg.respond(_ENC.encode(reply))

    async def _answer(self, data: bytes) -> ProjectorRange:
        try:
            request = _READ.decode(data)
        except msgspec.DecodeError as exc:
            return ProjectorRange(error=f"bad request: {exc}")
        budget = max(1024, self._nc.max_payload - _REPLY_SLACK)
        events, last = await self._reads.page(
            request.session_id, request.after, max(1, request.limit), budget
        )
        return ProjectorRange(events=[msgspec.Raw(e.raw) for e in events], last=last)
