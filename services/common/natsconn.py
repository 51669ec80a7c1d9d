"""One way to connect to NATS, with reconnect settings fit for long-lived services."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import nats
from nats.aio.client import Client

log = logging.getLogger(__name__)


async def connect_nats(
    url: str,
    name: str,
    *,
    user: str | None = None,
    password: str | None = None,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
) -> Client:
    """Connect and keep reconnecting forever (a service outlives a NATS restart).

    nats.py's defaults give up after ~2 minutes and detect a half-open TCP
    connection only after minutes (bus_guarantees.md); services must not.
    ``url`` may list every node of a cluster, comma-separated; the client
    fails over between them (and learns the others from the servers).
    """

    async def disconnected() -> None:
        log.warning("NATS disconnected (%s)", name)

    async def reconnected() -> None:
        log.warning("NATS reconnected (%s)", name)
        if on_reconnect is not None:
            await on_reconnect()

    async def error(exc: Exception) -> None:
        log.debug("NATS error (%s): %r", name, exc)

    return await nats.connect(
        servers_of(url),
        name=name,
        user=user,
        password=password,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,
        ping_interval=10,
        max_outstanding_pings=3,
        connect_timeout=5,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
        error_cb=error,
    )


def servers_of(url: str) -> list[str]:
    """``"nats://a:1, nats://b:2"`` → ``["nats://a:1", "nats://b:2"]``."""
    servers = [u.strip() for u in url.split(",") if u.strip()]
    if not servers:
        raise ValueError(f"no NATS URL in {url!r}")
    return servers
