"""``agentbus notifier [--nats URL]``: push events to device webhooks."""

from __future__ import annotations

import argparse
import os
import sys

from services.common.lifecycle import serve_until_signalled
from services.common.logs import configure_logging
from services.common.settings import SettingsError, load_settings
from services.notifier.service import run
from services.notifier.settings import NotifierSettings


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, run until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="agentbus notifier")
    parser.add_argument("--nats", help="NATS URL (AGENTBUS_NATS_URL)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(NotifierSettings, os.environ, {"nats_url": args.nats})
    except SettingsError as exc:
        print(f"agentbus notifier: {exc}", file=sys.stderr)
        return 2
    configure_logging("notifier", settings.notifier_log_level)
    serve_until_signalled(run, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
