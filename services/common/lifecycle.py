"""Process lifecycle: turn SIGINT/SIGTERM into a stop event."""

from __future__ import annotations

import asyncio
import signal


def install_stop_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT or SIGTERM (the service then drains and exits)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
