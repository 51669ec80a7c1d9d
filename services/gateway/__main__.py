"""``agentbus gateway [--listen HOST:PORT] [--nats URL] [--data-dir D]``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path

from aiohttp import web
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from eventstore.index import SessionIndex
from eventstore.log import JetStreamLog
from eventstore.pages import SessionPages
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_kv, ensure_log_stream
from schemas.names import BusNames
from services.common.lifecycle import install_stop_signals
from services.common.limits import raise_nofile
from services.common.logs import configure_logging
from services.common.natsconn import StopRequested, nats_connection
from services.common.settings import SettingsError, load_settings
from services.gateway.app import build_app
from services.gateway.auth import RateLimiter
from services.gateway.commands import SessionCommands
from services.gateway.endpoints import Endpoints
from services.gateway.files import FileDeps
from services.gateway.hub import Hub
from services.gateway.metrics import GatewayMetrics
from services.gateway.settings import GatewaySettings
from services.gateway.snapshots import SummarySnapshots
from services.gateway.stream import EventStream, StreamConfig
from services.gateway.summaries import SummaryCache
from services.gateway.tokens import load_secret

log = logging.getLogger("services.gateway")
DRAIN_S = 2.0


def main(argv: list[str]) -> int:
    """Parse flags, load settings, serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog="agentbus gateway")
    parser.add_argument("--listen", help="HOST:PORT (default 127.0.0.1:8080)")
    parser.add_argument("--nats", help="NATS URL")
    parser.add_argument("--data-dir", help="holds device_secret")
    args = parser.parse_args(argv)
    overrides = {
        "gateway_listen": args.listen,
        "nats_url": args.nats,
        "data_dir": args.data_dir,
    }
    try:
        settings = load_settings(GatewaySettings, os.environ, overrides)
        # The log stream's limits are the event store's: read the same variables
        # every service reads, so starting a gateway never rewrites them.
        store = load_settings(
            EventStoreSettings, os.environ, {"bus_prefix": settings.bus_prefix}
        )
    except SettingsError as exc:
        print(f"agentbus gateway: {exc}", file=sys.stderr)
        return 2
    configure_logging("gateway", settings.gateway_log_level)
    raise_nofile()  # one descriptor per SSE client (also when run without `up`)
    # StopRequested: stopped before NATS ever answered, a clean exit.
    with contextlib.suppress(StopRequested):
        asyncio.run(run(settings, store=store))
    return 0


async def open_idempotency(nc: Client, names: BusNames, ttl_s: float) -> KeyValue:
    """The KV bucket of prompt client_msg_ids (declared idempotently)."""
    js = nc.jetstream()
    config = KeyValueConfig(
        bucket=names.idempotency_bucket,
        history=1,
        ttl=ttl_s or None,
        storage=StorageType.FILE,
    )
    # Exists with another TTL (older deployment): used as it is.
    return await ensure_kv(js, config)


async def build(
    settings: GatewaySettings,
    store: EventStoreSettings,
    nc: Client,
    hub_out: list[Hub],
) -> web.Application:
    """Declare what the gateway needs on NATS and assemble the application."""
    names = BusNames(settings.bus_prefix)
    js = nc.jetstream()
    await ensure_log_stream(js, names, store)
    jlog = JetStreamLog(nc, names, append_deadline=settings.gateway_append_deadline_s)
    index = await SessionIndex.open(js, names)
    idem = await open_idempotency(nc, names, settings.gateway_idempotency_ttl_s)
    metrics = GatewayMetrics()
    hub = Hub(jlog, on_slow=metrics.slow_cuts.inc)
    hub_out.append(hub)
    metrics.track_feeds(lambda: hub.feeds)
    snapshots = await SummarySnapshots.open(js, names, jlog)
    summaries = SummaryCache(
        jlog, settings.gateway_summary_cache, snapshots=snapshots, nc=nc
    )
    commands = SessionCommands(jlog, index, summaries, idem)
    config = StreamConfig(
        ping_s=settings.gateway_ping_s,
        retry_ms=settings.gateway_retry_ms,
        buffer=settings.gateway_client_buffer,
        buffer_bytes=settings.gateway_client_buffer_bytes,
        page=settings.gateway_replay_page,
    )
    stream = EventStream(jlog, js, names, hub, config, metrics.stream_counters())
    pages = SessionPages(js, index.kv, names.sessions_bucket)
    endpoints = Endpoints(
        nc, commands, stream, metrics, settings.gateway_max_prompt_bytes, pages
    )
    secret = load_secret(Path(settings.data_dir), settings.device_secret)
    limiter = RateLimiter(settings.gateway_rate_per_s, settings.gateway_rate_burst)
    # JSON escapes can grow a 64 KiB prompt up to 6x; the text itself is checked after.
    max_body = max(1 << 20, settings.gateway_max_prompt_bytes * 6 + 65536)
    files = FileDeps(nc, names, secret, commands.owned)
    return build_app(endpoints, secret, limiter, metrics, max_body, files)


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` → (host, port)."""
    host, _, port = listen.rpartition(":")
    return host or "127.0.0.1", int(port)


async def run(
    settings: GatewaySettings,
    stop: asyncio.Event | None = None,
    *,
    store: EventStoreSettings | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGINT/SIGTERM when None)."""
    store = store or EventStoreSettings(bus_prefix=settings.bus_prefix)
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    async with AsyncExitStack() as stack:
        nc = await stack.enter_async_context(
            nats_connection(
                settings.nats_url,
                "gateway",
                user=settings.nats_user,
                password=settings.nats_password,
                stop=stop,
                # Every append was awaited by its request: a short drain is enough.
                drain_s=DRAIN_S,
            )
        )
        hubs: list[Hub] = []
        app = await build(settings, store, nc, hubs)
        runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=5.0, access_log=None
        )
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        # Streams end before the runner waits for handlers to finish.
        stack.push_async_callback(hubs[0].close)
        host, port = split_listen(settings.gateway_listen)
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        log.info("gateway listening on http://%s:%d", host, port)
        await stop.wait()
        log.info("gateway stopping")
    log.info("gateway stopped")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
