"""``agentbus pool``: keep N agent workers warm and give them sessions."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import msgspec

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

    settings, made = metrics_dir(settings)
    try:
        serve_until_signalled(run, settings)
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
    return 0


def metrics_dir(settings: PoolSettings) -> tuple[PoolSettings, str | None]:
    """With metrics on, the workers' multiprocess dir, exported to them.

    Returns the settings naming it and the directory made here (removed at exit).
    """
    if settings.pool_metrics_port is None:
        return settings, None
    made = None
    path = settings.pool_metrics_dir
    if path is None:
        path = made = tempfile.mkdtemp(prefix="agentbus-pool-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path  # inherited by every worker
    return msgspec.structs.replace(settings, pool_metrics_dir=path), made


if __name__ == "__main__":
    sys.exit(main())
