"""``agentbus broker``: run one broker replica."""

from __future__ import annotations

import argparse
import os
import sys

from services.broker.service import run
from services.broker.settings import BrokerSettings
from services.common.lifecycle import serve_until_signalled
from services.common.logs import configure_logging
from services.common.settings import SettingsError, load_settings


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, run until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="agentbus broker")
    parser.add_argument("--nats", help="NATS URL (AGENTBUS_NATS_URL)")
    parser.add_argument("--provider", choices=["local", "e2b", "ags"])
    args = parser.parse_args(argv)
    overrides = {"nats_url": args.nats, "broker_provider": args.provider}
    try:
        settings = load_settings(BrokerSettings, os.environ, overrides)
    except SettingsError as exc:
        print(f"agentbus broker: {exc}", file=sys.stderr)
        return 2
    configure_logging("broker")
    serve_until_signalled(run, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
