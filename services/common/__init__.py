"""Plumbing shared by every service: settings, NATS connection, lifecycle, logging.

No business logic lives here.
"""

from services.common.lifecycle import install_stop_signals
from services.common.logs import configure_logging
from services.common.natsconn import connect_nats
from services.common.settings import SettingsError, load_settings
from services.common.tasks import cancel_and_wait

__all__ = [
    "SettingsError",
    "cancel_and_wait",
    "configure_logging",
    "connect_nats",
    "install_stop_signals",
    "load_settings",
]
