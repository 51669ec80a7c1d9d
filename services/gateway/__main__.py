"""``agentbus gateway [--listen HOST:PORT] [--nats URL] [--data-dir D]``."""

from __future__ import annotations

import argparse
import os
import sys

from services.common.lifecycle import serve_until_signalled
from services.common.limits import raise_nofile
from services.common.logs import configure_logging
from services.common.settings import SettingsError, load_settings
from services.gateway.service import prices_of, run
from services.gateway.settings import GatewaySettings


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog="agentbus gateway")
    parser.add_argument("--listen", help="HOST:PORT (default 127.0.0.1:8080)")
    parser.add_argument("--nats", help="NATS URL")
    parser.add_argument("--data-dir", help="holds device_secret")
    args = parser.parse_args(argv)
    overrides = {
        "gateway_listen": args.listen,
        "nats_url": args.nats,
        "data_dir": args.data_dir,
    }
    try:
        settings = load_settings(GatewaySettings, os.environ, overrides)
        prices_of(settings)  # a malformed price table stops the start here
    except SettingsError as exc:
        print(f"agentbus gateway: {exc}", file=sys.stderr)
        return 2
    configure_logging("gateway", settings.gateway_log_level)
    raise_nofile()  # one descriptor per SSE client (also when run without `up`)
    serve_until_signalled(run, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
