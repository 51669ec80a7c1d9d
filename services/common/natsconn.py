"""One way to connect to NATS, with reconnect settings fit for long-lived services.

``nats_connection`` is the seam every service uses: connect (interrupted by the
service's stop event, so a service started while NATS is unreachable still
stops on SIGTERM), yield the client, then drain within a bound and close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import nats.errors

from services.common.natsclient import Client

log = logging.getLogger(__name__)

# How long a drain may take before the connection is closed regardless: a
# subscription that will not drain must not hold a stopping process (default 30 s).
DRAIN_S = 5.0

Hook = Callable[[], Awaitable[None]]


class StopRequested(Exception):
    """The stop signal came while still connecting to NATS (a clean exit)."""

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        super().__init__(f"{name}: stopped while connecting to {url}")


def nats_servers(url: str) -> list[str]:
    """``AGENTBUS_NATS_URL`` as nats.py's server list: comma-separated for a cluster."""
    servers = [part.strip() for part in url.split(",") if part.strip()]
    if not servers:
        raise ValueError(f"no NATS server URL in {url!r}")
    return servers


async def connect_nats(
    url: str,
    name: str,
    *,
    user: str | None = None,
    password: str | None = None,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
    stop: asyncio.Event | None = None,
) -> Client:
    """Connect and keep reconnecting forever (a service outlives a NATS restart).

    nats.py's defaults give up after ~2 minutes and detect a half-open TCP
    connection only after minutes (docs/design.md §6b); services must not.
    With ``stop``, setting it while the first connect is still being retried
    closes the client and raises :class:`StopRequested`.
    """
    nc = Client()
    disconnected, reconnected, error = _callbacks(name, on_reconnect, nc)
    connecting = nc.connect(
        nats_servers(url),
        name=name,
        user=user,
        password=password,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,  # type: ignore[arg-type]  # float works; stub says int
        ping_interval=10,
        max_outstanding_pings=3,
        connect_timeout=5,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
        error_cb=error,
    )
    if stop is None:
        await connecting
        return nc
    if not await _first_of(connecting, stop):
        await nc.close()
        raise StopRequested(name, url)
    return nc


def _callbacks(
    name: str, on_reconnect: Callable[[], Awaitable[None]] | None, nc: Client
) -> tuple[Hook, Hook, Callable[[Exception], Awaitable[None]]]:
    """Callbacks that log each disconnect once; a reconnect also runs the hook."""

    async def disconnected() -> None:
        if nc.is_draining or nc.is_closed:  # our own stop, not a fault
            log.info("NATS connection closed (%s)", name)
        else:
            log.warning("NATS disconnected (%s)", name)

    async def reconnected() -> None:
        log.warning("NATS reconnected (%s)", name)
        if on_reconnect is not None:
            await on_reconnect()

    async def error(exc: Exception) -> None:
        log.debug("NATS error (%s): %r", name, exc)

    return disconnected, reconnected, error


async def _first_of(connecting: Awaitable[None], stop: asyncio.Event) -> bool:
    """Await ``connecting`` unless ``stop`` is set first (then cancel it: False)."""
    connect = asyncio.ensure_future(connecting)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({connect, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        await _cancel_until_done(connect)
    if connect.cancelled():
        return False
    connect.result()  # raises the connect's own error, if any
    return True


async def _cancel_until_done(task: asyncio.Future[None]) -> None:
    """Cancel ``task`` until it ends: nats.py's connect loop can swallow one cancel
    (an inner ``wait_for`` racing with its result on 3.11) and go on retrying."""
    while not task.done():
        task.cancel()
        # A cancel of our own caller propagates from here.
        await asyncio.wait({task}, timeout=0.1)


async def close_nats(nc: Client, drain_s: float = DRAIN_S) -> None:
    """Drain within ``drain_s`` (pending publishes flushed), then make sure of close."""
    with contextlib.suppress(nats.errors.Error, TimeoutError):
        async with asyncio.timeout(drain_s):
            await nc.drain()
    if not nc.is_closed:
        # The server may be gone already (`agentbus up` stops it beside us): a
        # connection lost while closing is closed all the same.
        with contextlib.suppress(OSError):
            await nc.close()


@contextlib.asynccontextmanager
async def nats_connection(
    url: str,
    name: str,
    *,
    user: str | None = None,
    password: str | None = None,
    stop: asyncio.Event | None = None,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
    drain_s: float = DRAIN_S,
) -> AsyncIterator[Client]:
    """Connect (interruptible by ``stop``), yield the client, drain and close."""
    nc = await connect_nats(
        url, name, user=user, password=password, on_reconnect=on_reconnect, stop=stop
    )
    try:
        yield nc
    finally:
        await close_nats(nc, drain_s)
