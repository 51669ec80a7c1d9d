"""Logging set-up: one line per record, service name first."""

from __future__ import annotations

import logging
import sys


def configure_logging(service: str, level: str = "INFO") -> None:
    """Send records to stderr as ``LEVEL service logger: message``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(levelname)s {service} %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # nats.py logs every reconnect attempt at ERROR; ours say it once.
    logging.getLogger("nats").setLevel(logging.CRITICAL)
