"""``run(settings, stop)``: the broker process — subscriptions and loops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import aiohttp
import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from eventstore.log import JetStreamLog
from eventstore.streams import ensure_kv
from schemas.broker import Activity
from schemas.names import BusNames
from services.broker import metering
from services.broker.archive import Archiver, JetStreamArchiveStore
from services.broker.bind import Binder, refuse
from services.broker.client import activity_subject
from services.broker.feed import follow_log
from services.broker.files import FileServer
from services.broker.forks import ForkServer
from services.broker.lifecycle import Lifecycle
from services.broker.providers import make_provider
from services.broker.reaper import Reaper
from services.broker.reconciler import Reconciler
from services.broker.records import KvRecordStore
from services.broker.settings import BrokerSettings
from services.broker.turnsave import TurnSaves
from services.common.natsconn import nats_connection
from services.common.request import answering
from services.common.tasks import cancel_and_wait

log = logging.getLogger(__name__)
QUEUE = "broker"
_activity = msgspec.json.Decoder(Activity)


async def assignments_bucket(js: JetStreamContext, names: BusNames) -> KeyValue:
    """The pool's assignment bucket (declared here too, idempotently)."""
    return await ensure_kv(
        js,
        KeyValueConfig(
            bucket=names.assignments_bucket, history=1, storage=StorageType.FILE
        ),
    )


class Broker:
    """Every part of one broker replica, wired together."""

    def __init__(
        self,
        settings: BrokerSettings,
        nc: Client,
        http: aiohttp.ClientSession,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.nc = nc
        self.names = BusNames(settings.bus_prefix)
        self.replica = settings.broker_replica_id or "b-" + secrets.token_hex(4)
        self.http = http
        self.clock = clock  # the lifecycle's clock: tests move time by hand
        self._inflight: set[asyncio.Task[None]] = set()

    async def open(self, stack: AsyncExitStack) -> None:
        """Declare buckets and build the parts."""
        js = self.nc.jetstream()
        store = await KvRecordStore.open(js, self.names)
        store_mb = self.settings.broker_archive_store_max_mb
        archives = await JetStreamArchiveStore.open(
            js, self.names, int(store_mb * 1024 * 1024) if store_mb > 0 else -1
        )
        provider = make_provider(self.settings)
        stack.push_async_callback(provider.close)
        workspace = Archiver(archives, self.http, self.settings)
        self.life = Lifecycle(
            self.settings,
            self.names,
            provider,
            store,
            JetStreamLog(self.nc, self.names),
            self.http,
            workspace,
            self.replica,
            self.clock,
        )
        self.reaper = Reaper(self.life)
        self.reconciler = Reconciler(self.life)
        assign = await assignments_bucket(js, self.names)
        self.binder = Binder(self.life, assign, self.settings.broker_token_ttl_s)
        self.files = FileServer(self.life, workspace, self.settings, self.replica)
        self.forks = ForkServer(archives, store, self.clock)
        self.saves = TurnSaves(self.reaper, archives, assign)

    async def subscribe(self, stack: AsyncExitStack) -> None:
        """Request/reply handlers: bind, activity, file API, forks, turn saves.

        NATS runs one subscription's callbacks one after another; requests are
        handled concurrently instead (a slow create must not hold up other
        sessions' binds behind it), each in a task ended with the replica.
        """
        nc, names, spawn = self.nc, self.names, self._concurrent
        stack.push_async_callback(self._end_inflight)
        subs = [
            await nc.subscribe(names.broker_bind, QUEUE, cb=spawn(self._on_bind)),
            await nc.subscribe(activity_subject(names), QUEUE, cb=self._on_activity),
            *await self.files.subscribe(nc, names, QUEUE, spawn),
            await self.forks.subscribe(nc, names, QUEUE, spawn),
            await self.saves.subscribe(nc, names, QUEUE, spawn),
        ]
        for sub in subs:
            stack.push_async_callback(sub.unsubscribe)

    def _concurrent(
        self, cb: Callable[[Msg], Awaitable[None]]
    ) -> Callable[[Msg], Awaitable[None]]:
        async def run(msg: Msg) -> None:
            await cb(msg)

        async def start(msg: Msg) -> None:
            task = asyncio.create_task(run(msg))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

        return start

    async def _end_inflight(self) -> None:
        for task in list(self._inflight):
            await cancel_and_wait(task)

    async def _on_bind(self, msg: Msg) -> None:
        try:
            async with answering(self.nc, msg):
                reply = await self.binder.handle(msg.data)
        except Exception:
            log.exception("bind failed")
            reply = refuse("internal", "the broker failed; try again")
        await msg.respond(reply)

    async def _on_activity(self, msg: Msg) -> None:
        try:
            act = _activity.decode(msg.data)
            await self.life.touch(act.session_id, act.hold_s)
        except Exception:
            log.exception("activity %r not recorded", msg.data[:200])

    async def sweep_loop(self, stop: asyncio.Event) -> None:
        """Apply the timers every ``broker_sweep_s``."""
        while not stop.is_set():
            try:
                await self.reaper.sweep_once()
            except Exception:
                log.exception("sweep failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.broker_sweep_s)

    async def reconcile_loop(self, stop: asyncio.Event) -> None:
        """List provider sandboxes soon after start, then every period."""
        wait_s = min(
            self.settings.broker_reconcile_first_s, self.settings.broker_reconcile_s
        )
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait_s)
            wait_s = self.settings.broker_reconcile_s
            if stop.is_set():
                return
            try:
                await self.reconciler.run_once()
            except Exception:
                log.exception("reconcile failed")


async def run(settings: BrokerSettings, stop: asyncio.Event | None = None) -> None:
    """Run one broker replica until ``stop`` is set."""
    stop = stop or asyncio.Event()
    async with AsyncExitStack() as stack:
        nc = await stack.enter_async_context(
            nats_connection(
                settings.nats_url,
                "broker",
                user=settings.nats_user,
                password=settings.nats_password,
                stop=stop,
            )
        )
        http = await stack.enter_async_context(aiohttp.ClientSession())
        await metering.serve_metrics(settings, stack)
        broker = Broker(settings, nc, http)
        await broker.open(stack)
        await broker.subscribe(stack)
        log.info("broker %s ready (%s)", broker.replica, settings.broker_provider)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(broker.sweep_loop(stop))
            tg.create_task(broker.reconcile_loop(stop))
            tg.create_task(follow_log(nc, broker.names, broker.reaper, stop))
            tg.create_task(broker.files.expire_loop(stop))
            await stop.wait()
