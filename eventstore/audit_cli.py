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

import nats
import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from eventstore.audit import AuditReport, render_json, render_text, verify
from eventstore.errors import EventStoreError, RangeUnavailableError
from eventstore.log import JetStreamLog, StoredEvent
from eventstore.projection import SqliteProjection
from eventstore.reader import SEQ_HEADER
from eventstore.settings import EventStoreSettings
from schemas.names import BusNames
from services.common.localnats import find_local_nats
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
            settings.nats_url.split(","),  # every node of a cluster
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
        head = await log.last_seq(session_id)
        events = await _read_all(log, nc.jetstream(), session_id, head)
    finally:
        await nc.close()
    return verify(session_id, events, head)


async def _read_all(
    log: JetStreamLog, js: JetStreamContext, session_id: str, head: int
) -> list[StoredEvent]:
    """Every event the log still holds, reading on past holes up to ``head``."""
    events: list[StoredEvent] = []
    after = 0
    while True:
        try:
            page = await log.read(session_id, after, PAGE)
        except RangeUnavailableError:
            page = []
        events += page
        if len(page) == PAGE:
            after = page[-1].seq
            continue
        after = events[-1].seq if events else after
        if after >= head:
            return events
        # A hole (a removed event): go on from the next event stored after it.
        found = await _next_stored(js, log.names, session_id, after)
        if found is None or (not page and found == after + 1):
            return events
        after = found - 1


async def _next_stored(
    js: JetStreamContext, names: BusNames, session_id: str, after: int
) -> int | None:
    """The lowest seq above ``after`` among the session's events in JetStream."""
    stream_seq = 1
    while True:
        try:
            msg = await js.get_msg(
                names.log_stream,
                seq=stream_seq,
                next=True,
                subject=names.log_session(session_id),
                direct=True,
            )
        except NotFoundError:
            return None
        seq = int((msg.headers or {}).get(SEQ_HEADER, "0"))
        if seq > after:
            return seq
        stream_seq = (msg.seq or 0) + 1


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
