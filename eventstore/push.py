"""A lean push consumer for the replay engine (``reader.py``).

nats.py's ordered consumer costs, per consumer, a task polling flow control
every 0.25 s and another checking heartbeats, and per message a second parse
of the reply subject (``Msg.metadata``) and a hop through our queue. The
engine does not need its ordering machinery: every event carries its
per-session seq, so a duplicate is dropped and a gap re-locates from the
cursor (``reader.py``). This consumer is the plain version of the same thing:

* one core subscription on a fresh inbox, then one ephemeral push consumer
  (ack none, flow control, memory storage, R1) delivering to it, created
  with the stream's name (no stream lookup);
* a flow-control request is answered when the reader reaches it (so the
  server never runs more than its window ahead of what was consumed), as is
  a "consumer stalled" heartbeat;
* an idle heartbeat whose last consumer seq is not the last one we got, a
  reconnect of the connection, or silence for ``SILENT_HEARTBEATS``
  heartbeats ends the consumer with :class:`Restart` (the engine re-creates it
  from its cursor). The last two are checked by one :class:`Watch` task per
  reader, every ``WATCHDOG_S``, not a timer per consumer or per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import cast

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

# Idle heartbeat of a push consumer (1,000 followed sessions: 200 a second).
HEARTBEAT_S = 5.0
# A consumer silent for this many heartbeats is gone (deleted server-side).
SILENT_HEARTBEATS = 3
# How often the watch checks for a reconnect and for silent consumers.
WATCHDOG_S = 0.5
_STATUS, _CONTROL = "Status", "100"
_LAST_CONSUMER, _STALLED = "Nats-Last-Consumer", "Nats-Consumer-Stalled"
_V1_TOKENS = 9  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>


class Restart(Exception):
    """The consumer cannot go on: re-create it from the cursor."""


def ack_seqs(reply: str) -> tuple[int, int, int]:
    """(stream seq, consumer seq, pending) from a delivery's ``$JS.ACK`` subject."""
    tokens = reply.split(".")
    if tokens[:2] != ["$JS", "ACK"] or len(tokens) < _V1_TOKENS:
        raise Restart(f"not a JetStream delivery: {reply[:80]!r}")
    if len(tokens) == _V1_TOKENS:
        return int(tokens[5]), int(tokens[6]), int(tokens[8])
    ack = Msg.Ack  # v2: $JS.ACK.<domain>.<account hash>.<stream>...
    return (
        int(tokens[ack.StreamSeq]),
        int(tokens[ack.ConsumerSeq]),
        int(tokens[ack.NumPending]),
    )


class Watch:
    """Ends the consumers of one connection that reconnected or went silent."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._open: set[PushConsumer] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, consumer: PushConsumer) -> None:
        self._open.add(consumer)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())

    def discard(self, consumer: PushConsumer) -> None:
        self._open.discard(consumer)
        if not self._open and self._task is not None:
            self._task.cancel()  # restarted by the next add
            self._task = None

    async def _run(self) -> None:
        while self._open:
            await asyncio.sleep(WATCHDOG_S)
            reconnects = self._nc.stats["reconnects"]
            silent = time.monotonic() - HEARTBEAT_S * SILENT_HEARTBEATS
            for consumer in list(self._open):
                if consumer.reconnects != reconnects or consumer.silent_since(silent):
                    consumer.lose()


class PushConsumer:
    """Messages of ``subject`` from stream seq ``start`` on, as delivered.

    The subscription has no callback: nats.py's reader puts each message in the
    subscription's queue and the task reading this consumer takes it from
    there, one hand-off (a callback would add a task of its own in between).
    """

    def __init__(self, nc: Client, stream: str, subject: str, start: int) -> None:
        self._nc = nc
        self._stream = stream
        self._subject = subject
        self._start = start
        self._queue: asyncio.Queue[Msg | None] = asyncio.Queue()
        self._held: Msg | None = None  # a control message ``poll`` took out
        self._sub: Subscription | None = None
        self._lost = False
        self._dseq = 0  # the last consumer seq delivered
        self.reconnects = nc.stats["reconnects"]
        self.active = time.monotonic()

    async def open(self, api_wait_s: float) -> None:
        """Subscribe to a fresh inbox, then create the consumer delivering to it."""
        inbox = self._nc.new_inbox()
        # No byte limit: flow control bounds what is in flight (and we read
        # the queue ourselves, so nats.py's byte count would never go down).
        self._sub = await self._nc.subscribe(inbox, pending_bytes_limit=0)
        # nats.py's own queue of this subscription (see the class doc); ``lose``
        # puts None in it to wake the reader.
        self._queue = cast("asyncio.Queue[Msg | None]", self._sub._pending_queue)
        config = ConsumerConfig(
            deliver_subject=inbox,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self._start,
            filter_subject=self._subject,
            ack_policy=AckPolicy.NONE,
            max_deliver=1,
            flow_control=True,
            idle_heartbeat=HEARTBEAT_S,
            mem_storage=True,
            num_replicas=1,
            # the server drops the consumer 1 s after we unsubscribe, not 5 s
            inactive_threshold=1.0,
        )
        await self._nc.jsm().add_consumer(self._stream, config, timeout=api_wait_s)
        self.active = time.monotonic()  # silence counts from here (a slow create)

    async def close(self) -> None:
        """Unsubscribe (the server then drops the consumer within 1 s)."""
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
                await self._sub.unsubscribe()

    def silent_since(self, moment: float) -> bool:
        """Nothing taken since ``moment`` and nothing waiting to be taken."""
        return self.active < moment and self._queue.empty() and self._held is None

    def lose(self) -> None:
        """The connection reconnected, or the consumer went silent."""
        if self._lost:
            return  # the reader is woken once
        self._lost = True
        self._queue.put_nowait(None)  # wakes a reader waiting in ``next``

    def poll(self) -> tuple[Msg, int, int] | None:
        """The next delivery if one is queued (None: wait with :meth:`next`)."""
        if self._held is not None or self._queue.empty():
            return None
        msg = self._queue.get_nowait()
        if msg is None or not msg.reply.startswith("$JS.ACK."):
            self._held = msg
            return None
        sseq, self._dseq, pending = ack_seqs(msg.reply)
        return msg, sseq, pending

    async def next(self) -> tuple[Msg, int, int]:
        """The next delivery and its (stream seq, pending); controls are handled."""
        while True:
            msg, self._held = self._held, None
            if msg is None:
                if self._lost and self._queue.empty():
                    raise Restart("reconnected or silent")
                msg = await self._queue.get()
                self.active = time.monotonic()
                if msg is None:
                    continue  # woken by ``lose``
            if msg.reply.startswith("$JS.ACK."):
                sseq, self._dseq, pending = ack_seqs(msg.reply)
                return msg, sseq, pending
            await self._control(msg)

    async def _control(self, msg: Msg) -> None:
        """Flow control and heartbeats (anything else on the inbox is ignored)."""
        headers = msg.headers or {}
        if msg.data or headers.get(_STATUS) != _CONTROL:
            return
        reply = msg.reply or headers.get(_STALLED)
        if reply:
            await self._nc.publish(reply)
        last = headers.get(_LAST_CONSUMER)
        if last is not None and last.isdigit() and int(last) != self._dseq:
            raise Restart(f"consumer delivered {last}, we got {self._dseq}")
