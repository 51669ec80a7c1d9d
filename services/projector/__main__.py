"""``agentbus projector [--nats URL] [--db PATH]``: run the projector process."""

from __future__ import annotations

import argparse
import os
import sys

from eventstore.errors import EventStoreError
from eventstore.settings import EventStoreSettings
from services.common.lifecycle import serve_until_signalled
from services.common.logs import configure_logging
from services.common.settings import SettingsError, load_settings
from services.projector.service import run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentbus projector", description=__doc__)
    p.add_argument("--nats", help="NATS URL (AGENTBUS_NATS_URL)")
    p.add_argument("--db", help="SQLite file (AGENTBUS_PROJECTOR_DB)")
    return p


def main(argv: list[str]) -> int:
    """Entry point of ``agentbus projector``."""
    args = _parser().parse_args(argv)
    overrides = {"nats_url": args.nats, "projector_db": args.db}
    try:
        settings = load_settings(EventStoreSettings, os.environ, overrides)
    except SettingsError as exc:
        print(f"agentbus projector: {exc}", file=sys.stderr)
        return 2
    configure_logging("projector")
    try:
        serve_until_signalled(run, settings)
    except EventStoreError as exc:
        print(f"agentbus projector: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
