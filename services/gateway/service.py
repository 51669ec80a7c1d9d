"""The gateway process: declare what it needs on NATS, serve HTTP until stopped."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from pathlib import Path

from aiohttp import web
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from eventstore.index import SessionIndex
from eventstore.log import JetStreamLog
from eventstore.pages import SessionPages
from eventstore.streams import ensure_kv, ensure_log_stream
from schemas.names import BusNames
from services.common.listen import split_listen
from services.common.natsconn import nats_connection
from services.common.settings import SettingsError
from services.common.webhooks import open_webhooks
from services.gateway.app import build_app
from services.gateway.appside import add_app_side
from services.gateway.auth import RateLimiter
from services.gateway.caps import CapLimits, DeviceCaps
from services.gateway.commands import SessionCommands
from services.gateway.endpoints import Endpoints
from services.gateway.files import FileDeps
from services.gateway.hub import Hub
from services.gateway.listener import GuardedSite, listening_socket
from services.gateway.metrics import GatewayMetrics
from services.gateway.prices import PriceError, PriceTable, price_table
from services.gateway.settings import GatewaySettings
from services.gateway.snapshots import SummarySnapshots
from services.gateway.stream import EventStream, StreamConfig
from services.gateway.streamcount import StreamCounts, open_stream_counts
from services.gateway.summaries import SummaryCache
from services.gateway.tokens import load_secret
from services.gateway.usage import UsageReader
from services.gateway.webhooks import WebhookRoutes

log = logging.getLogger("services.gateway")
DRAIN_S = 2.0
# A crashed gateway's streams stop counting against their devices after this.
STREAM_COUNT_TTL_S = 60.0


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
    nc: Client,
    metrics: GatewayMetrics,
    streams: StreamCounts,
    hub_out: list[Hub],
) -> web.Application:
    """Declare what the gateway needs on NATS and assemble the application."""
    names = BusNames(settings.bus_prefix)
    js = nc.jetstream()
    await ensure_log_stream(js, names, settings.log_stream())
    jlog = JetStreamLog(nc, names, append_deadline=settings.gateway_append_deadline_s)
    index = await SessionIndex.open(js, names)
    idem = await open_idempotency(nc, names, settings.gateway_idempotency_ttl_s)
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
    caps = DeviceCaps(cap_limits(settings), index, summaries, streams)
    webhooks = WebhookRoutes(
        await open_webhooks(js, names), allow_private=settings.webhook_allow_private
    )
    usage = UsageReader(
        jlog, index, prices_of(settings), page=settings.gateway_replay_page
    )
    endpoints = Endpoints(
        nc,
        commands,
        stream,
        metrics,
        settings.gateway_max_prompt_bytes,
        caps,
        webhooks,
        usage,
        pages=SessionPages(js, index.kv, names.sessions_bucket),
    )
    secret = load_secret(Path(settings.data_dir), settings.device_secret)
    limiter = RateLimiter(settings.gateway_rate_per_s, settings.gateway_rate_burst)
    # JSON escapes can grow a 64 KiB prompt up to 6x; the text itself is checked after.
    max_body = max(1 << 20, settings.gateway_max_prompt_bytes * 6 + 65536)
    files = FileDeps(nc, names, secret, commands.owned)
    app = build_app(endpoints, secret, limiter, metrics, max_body, files)
    add_app_side(app, settings, idem, secret)  # tickets' one-use marks in idem
    return app


def prices_of(settings: GatewaySettings) -> PriceTable:
    """The price table of the settings (a malformed one is a SettingsError)."""
    try:
        return price_table(
            settings.usage_price_running_per_s,
            settings.usage_price_paused_per_s,
            settings.usage_price_archived_gb_month,
            settings.usage_model_prices,
        )
    except PriceError as exc:
        raise SettingsError("AGENTBUS_USAGE_MODEL_PRICES", str(exc)) from exc


def cap_limits(settings: GatewaySettings) -> CapLimits:
    """The per-device caps the settings ask for."""
    return CapLimits(
        sessions=settings.gateway_max_sessions,
        sandboxes=settings.gateway_max_sandboxes,
        streams=settings.gateway_max_streams,
    )


async def run(settings: GatewaySettings, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set (``serve_until_signalled`` sets it on a signal)."""
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
        metrics = GatewayMetrics()
        streams = await stream_counts(settings, nc.jetstream())
        app = await build(settings, nc, metrics, streams, hubs)
        refresher = asyncio.create_task(streams.refresh(stop))
        stack.push_async_callback(_finish, refresher)
        runner = web.AppRunner(
            app,
            handler_cancellation=True,
            shutdown_timeout=5.0,
            access_log=None,
            # Idle between requests: the header deadline of every later request.
            keepalive_timeout=settings.gateway_header_timeout_s or 75.0,
        )
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        # Streams end before the runner waits for handlers to finish.
        stack.push_async_callback(hubs[0].close)
        host, port = split_listen(settings.gateway_listen)
        sock = listening_socket(host, port, reuse_port=settings.gateway_reuse_port)
        site = GuardedSite(
            runner, sock, settings.gateway_header_timeout_s, metrics.header_timeouts.inc
        )
        await site.start()
        log.info("gateway listening on http://%s:%d", host, port)
        await stop.wait()
        log.info("gateway stopping")
    log.info("gateway stopped")


async def stream_counts(
    settings: GatewaySettings, js: JetStreamContext
) -> StreamCounts:
    """Per-device stream counts, shared through KV when the stream cap is on."""
    if settings.gateway_max_streams <= 0:
        return StreamCounts(None)
    names = BusNames(settings.bus_prefix)
    kv = await open_stream_counts(js, names, STREAM_COUNT_TTL_S)
    return StreamCounts(
        kv,
        STREAM_COUNT_TTL_S,
        reopen=lambda: open_stream_counts(js, names, STREAM_COUNT_TTL_S),
    )


async def _finish(task: asyncio.Task[None]) -> None:
    """Wait for a task that ends on ``stop`` (cancel it if it does not)."""
    try:
        await asyncio.wait_for(task, DRAIN_S)
    except TimeoutError:
        task.cancel()
