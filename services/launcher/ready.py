"""Wait until the embedded NATS answers JetStream requests on every node."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import nats
from nats.errors import Error as NatsError

log = logging.getLogger("agentbus.up")


async def wait_nats_ready(
    urls: list[str],
    user: str,
    password: str,
    stop: asyncio.Event,
    timeout_s: float = 60.0,
) -> None:
    """Return once each node answers ``$JS.API.INFO`` (a cluster: has a meta leader).

    Services started before that would crash on their first declaration and
    burn restarts; a stop request ends the wait early.
    """
    async with asyncio.timeout(timeout_s):
        for url in urls:
            while not stop.is_set():
                if await _answers(url, user, password):
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)


async def _quiet(exc: Exception) -> None:
    log.debug("NATS not up yet: %r", exc)


async def _answers(url: str, user: str, password: str) -> bool:
    try:
        nc = await nats.connect(
            url,
            user=user,
            password=password,
            error_cb=_quiet,
            connect_timeout=1,
            allow_reconnect=False,
            max_reconnect_attempts=0,
        )
    except (OSError, NatsError, TimeoutError):
        return False
    try:
        await nc.jetstream(timeout=1).account_info()
    except (NatsError, TimeoutError) as exc:
        log.debug("JetStream on %s not ready: %r", url, exc)
        return False
    finally:
        await nc.close()
    return True
