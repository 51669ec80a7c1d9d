"""A worker process: imported, connected to NATS, idle until the pool assigns.

Started by the pool as ``python -m services.pool.worker``. It reads its config
and assignments from stdin and answers on a private copy of stdout (fd 1 itself
is pointed at stderr, so no stray print can corrupt the protocol). When stdin
closes, the pool is gone: the worker exits at once, like a crash, and its leases
expire for another pool to recover.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import BinaryIO

from nats.js.errors import ServiceUnavailableError

from eventstore.log import JetStreamLog
from schemas.names import BusNames
from services.common.logs import configure_logging
from services.common.natsconn import connect_nats
from services.pool.bus import ensure_buckets
from services.pool.context import WorkerContext
from services.pool.errors import LeaseLostError
from services.pool.ipc import (
    Assign,
    Busy,
    FromWorker,
    Idle,
    Ready,
    Released,
    Stop,
    ToWorker,
    WorkerConfig,
    Yield,
    decode_config,
    decode_to_worker,
    encode,
)
from services.pool.lease import Held, LeaseStore
from services.pool.models.factory import make_model
from services.pool.session import SessionRunner
from services.pool.snapshot import SnapshotStore, ensure_snapshots

log = logging.getLogger(__name__)

EXIT_LEASE_LOST = 3
EXIT_START_FAILED = 4


class Worker:
    """The worker's loop: wait for an assignment, serve it, report, repeat."""

    def __init__(self, ctx: WorkerContext, out: BinaryIO) -> None:
        self.ctx = ctx
        self._out = out
        self._inbox: asyncio.Queue[ToWorker] = asyncio.Queue()
        self._runner: SessionRunner | None = None

    def send(self, msg: FromWorker) -> None:
        """One line to the pool."""
        self._out.write(encode(msg))

    async def read_commands(self, lines: asyncio.Queue[bytes]) -> None:
        """Feed the inbox from the pool's lines (see :func:`watch_the_pool`)."""
        while True:
            msg = decode_to_worker(await lines.get())
            runner = self._runner
            if isinstance(msg, Yield):
                if runner is not None:
                    await runner.give_way()
                continue
            if isinstance(msg, Stop) and runner is not None:
                await runner.stop(msg.grace_s)
            await self._inbox.put(msg)

    async def serve(self) -> None:
        """Serve assignments until told to stop."""
        self.send(Ready(worker_id=self.ctx.worker_id, pid=self.ctx.pid))
        while True:
            msg = await self._inbox.get()
            if isinstance(msg, Stop):
                return
            if isinstance(msg, Assign):
                await self._serve(msg)

    async def _serve(self, msg: Assign) -> None:
        held = Held(msg.lease, msg.revision)
        sid = held.lease.session_id

        def on_idle(idle: bool) -> None:
            self.send(Idle(session_id=sid) if idle else Busy(session_id=sid))

        runner = self._runner = SessionRunner(self.ctx, held, msg.token, on_idle)
        try:
            reason = await runner.run()
        except* LeaseLostError:
            log.error("lease of %s lost; exiting", held.lease.session_id)
            os._exit(EXIT_LEASE_LOST)
        finally:
            self._runner = None
        self.send(Released(session_id=sid, reason=reason, rewake_seq=runner.rewake_seq))


async def watch_the_pool(
    reader: asyncio.StreamReader, lines: asyncio.Queue[bytes]
) -> None:
    """Pass stdin's lines on; at EOF the pool is gone and the worker exits at once.

    Runs from before start-up, so a worker still waiting for a busy bus
    notices a pool that died or stopped (it was left running before).
    """
    while line := await reader.readline():
        await lines.put(line)
    log.warning("the pool is gone; exiting")
    os._exit(0)


async def run_worker(
    config: WorkerConfig, reader: asyncio.StreamReader, out: BinaryIO
) -> None:
    """Connect, then serve; ``reader`` is stdin after the config line."""
    lines: asyncio.Queue[bytes] = asyncio.Queue()
    pool_watch = asyncio.create_task(watch_the_pool(reader, lines))
    settings = config.settings
    names = BusNames(settings.bus_prefix)
    nc = await connect_nats(
        settings.nats_url,
        f"worker:{config.worker_id}",
        user=settings.nats_user,
        password=settings.nats_password,
    )
    js = nc.jetstream()
    try:
        leases_kv, _ = await ensure_buckets(js, names)
        snapshots_kv = await ensure_snapshots(js, names)
    except (TimeoutError, ServiceUnavailableError) as exc:  # nats' is a TimeoutError
        # A busy bus (a hundred workers starting at once on two cores): exit for
        # the pool to start another. Measured at 100 sessions, retrying here on
        # the same connection kept 57 workers waiting for a minute; a fresh one
        # starts (turn start p99 1.2-2.6 s against 19-24 s).
        log.error("start-up: the bus did not answer (%r); exiting", exc)
        os._exit(EXIT_START_FAILED)
    model = make_model(settings)
    ctx = WorkerContext(
        settings=settings,
        names=names,
        nc=nc,
        js=js,
        log=JetStreamLog(nc, names),
        leases=LeaseStore(leases_kv, settings.pool_lease_ttl_s),
        snapshots=SnapshotStore(snapshots_kv, settings.pool_snapshot_every),
        model=model,
        worker_id=config.worker_id,
        host=config.host,
        pid=os.getpid(),
    )
    worker = Worker(ctx, out)
    commands = asyncio.create_task(worker.read_commands(lines))
    try:
        await worker.serve()
    finally:
        commands.cancel()
        pool_watch.cancel()
        await model.close()
        await nc.drain()


async def _main(protocol_fd: int) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    config = decode_config(await reader.readline())
    configure_logging(f"worker:{config.worker_id}", config.settings.pool_log_level)
    out = os.fdopen(protocol_fd, "wb", buffering=0)
    await run_worker(config, reader, out)
    return 0


def main() -> int:
    """Entry point of a worker process."""
    # The protocol gets its own fd; fd 1 goes to stderr so prints stay harmless.
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    return asyncio.run(_main(protocol_fd))


if __name__ == "__main__":
    sys.exit(main())
