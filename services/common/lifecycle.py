"""Process lifecycle: turn SIGINT/SIGTERM into a stop event."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

from services.common.natsconn import StopRequested

S = TypeVar("S")
log = logging.getLogger(__name__)


def install_stop_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT or SIGTERM (the service then drains and exits)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


def serve_until_signalled(
    run: Callable[[S, asyncio.Event], Awaitable[None]], settings: S
) -> None:
    """``asyncio.run`` a service's ``run(settings, stop)``; SIGINT/SIGTERM stop it.

    A stop before NATS ever answered (:class:`StopRequested`) is a clean exit.
    """

    async def serve() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        try:
            await run(settings, stop)
        except StopRequested as exc:
            log.info("%s", exc)

    asyncio.run(serve())
