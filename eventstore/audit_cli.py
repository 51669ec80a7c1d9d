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

import nats
import nats.errors

from eventstore.audit import AuditReport, render_json, render_text, verify
from eventstore.errors import EventStoreError, RangeUnavailableError
from eventstore.log import JetStreamLog, StoredEvent
from eventstore.projection import SqliteProjection
from eventstore.settings import EventStoreSettings
from schemas.names import BusNames
from services.common.settings import SettingsError, load_settings

PAGE = 1000


class SourceError(EventStoreError):
    """The log to audit cannot be reached."""

    def __init__(self, source: str, cause: str) -> None:
        self.source = source
        super().__init__(f"cannot read {source}: {cause}")


async def audit_db(path: str, session_id: str) -> AuditReport:
    """Audit a session from the projector's SQLite file alone."""
    db = await SqliteProjection.open(path, readonly=True)
    try:
        events = await db.read(session_id)
        row = await db.session(session_id)
    finally:
        await db.close()
    return verify(session_id, events, row.last_seq if row else None)


async def audit_nats(settings: EventStoreSettings, session_id: str) -> AuditReport:
    """Audit a session from the live log (old ranges via the projector)."""
    try:
        nc = await nats.connect(
            settings.nats_url,
            user=settings.nats_user,
            password=settings.nats_password,
            connect_timeout=3,
            max_reconnect_attempts=0,
            allow_reconnect=False,
        )
    except (OSError, nats.errors.Error) as exc:
        raise SourceError(settings.nats_url, repr(exc)) from exc
    try:
        log = JetStreamLog(nc, BusNames(settings.bus_prefix))
        events, unread = await _read_all(log, session_id)
        head = max(await log.last_seq(session_id), unread)
    finally:
        await nc.close()
    return verify(session_id, events, head)


async def _read_all(
    log: JetStreamLog, session_id: str
) -> tuple[list[StoredEvent], int]:
    """Every event the log serves; and the first seq it could not serve (or 0)."""
    events: list[StoredEvent] = []
    while True:
        after = events[-1].seq if events else 0
        try:
            page = await log.read(session_id, after, PAGE)
        except RangeUnavailableError:
            return events, after + 1
        events += page
        if len(page) < PAGE:
            return events, 0


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
    return p


def main(argv: list[str]) -> int:
    """Entry point of ``agentbus audit``."""
    args = parser().parse_args(argv)
    try:
        settings = load_settings(
            EventStoreSettings, os.environ, {"nats_url": args.nats}
        )
    except SettingsError as exc:
        print(f"agentbus audit: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(run_audit(args, settings))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
