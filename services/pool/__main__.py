"""``agentbus pool``: keep N agent workers warm and give them sessions."""

from __future__ import annotations

import argparse
import os
import sys

from services.common.lifecycle import serve_until_signalled
from services.common.logs import configure_logging
from services.common.settings import SettingsError, load_settings
from services.pool.settings import PoolSettings


def parse(argv: list[str]) -> argparse.Namespace:
    """Flags override ``AGENTBUS_*`` variables."""
    p = argparse.ArgumentParser(prog="agentbus pool", description=__doc__)
    p.add_argument("--nats", dest="nats_url", help="NATS URL")
    p.add_argument("--workers", dest="pool_workers", type=int, help="warm workers (N)")
    p.add_argument(
        "--approval",
        choices=["auto", "ask-exec", "ask-all"],
        help="which tool calls need a person",
    )
    p.add_argument(
        "--model", choices=["scripted", "openai", "anthropic"], help="model client"
    )
    p.add_argument("--prefix", dest="bus_prefix", help="bus name prefix")
    p.add_argument(
        "--idle-release", dest="pool_idle_release_s", type=float, help="T1 seconds"
    )
    p.add_argument("--tool-backend", dest="pool_tool_backend", help="only: envd")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``agentbus pool``."""
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings(PoolSettings, os.environ, vars(args))
    except SettingsError as exc:
        print(f"agentbus pool: {exc}", file=sys.stderr)
        return 2
    if settings.pool_workers < 1:
        print(
            "agentbus pool: AGENTBUS_POOL_WORKERS: must be at least 1", file=sys.stderr
        )
        return 2
    from services.pool.models.factory import parse_fallbacks

    try:
        parse_fallbacks(settings.model_fallbacks, None)
    except ValueError as exc:
        print(f"agentbus pool: {exc}", file=sys.stderr)
        return 2
    configure_logging("pool", settings.pool_log_level)
    from services.pool.service import run

    serve_until_signalled(run, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
