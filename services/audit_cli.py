"""``agentbus audit SESSION [--json] [--db PATH] [--nats URL]``.

Folds the session log from seq 1, verifies continuity and the hash chain, prints
the transcript; exits 0 when it verifies, 1 naming the first break, 2 when the
log cannot be reached. ``--db`` audits the projector's SQLite file alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import nats.errors

from eventstore.audit import render_json, render_text
from eventstore.audit_source import SourceError, audit_db, audit_nats
from eventstore.errors import EventStoreError
from eventstore.settings import EventStoreSettings
from services.common.localnats import find_local_nats
from services.common.settings import SettingsError, load_settings


async def run_audit(args: argparse.Namespace, settings: EventStoreSettings) -> int:
    """Audit, print, and return the exit status."""
    try:
        if args.db:
            report = await audit_db(args.db, args.session)
        else:
            report = await audit_nats(settings, args.session)
    except (SourceError, EventStoreError, TimeoutError, nats.errors.Error) as exc:
        print(f"agentbus audit: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(render_json(report).decode() + "\n")
    else:
        print(render_text(report))
    if report.first_break is not None:
        brk = report.first_break
        print(f"agentbus audit: break at seq {brk.seq}: {brk.problem}", file=sys.stderr)
        return 1
    return 0


def parser() -> argparse.ArgumentParser:
    """Flags of ``agentbus audit``."""
    p = argparse.ArgumentParser(prog="agentbus audit", description=__doc__)
    p.add_argument("session", help="session id")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--db", help="audit this projector SQLite file instead of NATS")
    p.add_argument("--nats", help="NATS URL (AGENTBUS_NATS_URL)")
    p.add_argument(
        "--data-dir",
        default=os.environ.get("AGENTBUS_DATA_DIR", ".agentbus"),
        help="an `agentbus up` data dir: its embedded NATS and admin credential "
        "are used when no URL/credential is given",
    )
    return p


def main(argv: list[str]) -> int:
    """Entry point of ``agentbus audit``."""
    args = parser().parse_args(argv)
    try:
        settings = load_settings(EventStoreSettings, os.environ, _local(args))
    except SettingsError as exc:
        print(f"agentbus audit: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(run_audit(args, settings))


def _local(args: argparse.Namespace) -> dict[str, str | None]:
    """Overrides: the flag's URL, else those of a local ``agentbus up``."""
    overrides: dict[str, str | None] = {"nats_url": args.nats}
    local = find_local_nats(Path(args.data_dir))
    if local is None or os.environ.get("AGENTBUS_NATS_USER"):
        return overrides
    if args.nats is None and "AGENTBUS_NATS_URL" not in os.environ:
        overrides["nats_url"] = local.url
    if overrides["nats_url"] == local.url:
        overrides |= {"nats_user": local.user, "nats_password": local.password}
    return overrides


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
