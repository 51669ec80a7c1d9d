"""Where an audit reads a session from: the live log, or the projector's SQLite.

``agentbus audit`` (``services/audit_cli.py``) is the command around these.
"""

from __future__ import annotations

import nats
import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from eventstore.audit import AuditReport, verify
from eventstore.deadletter import DEAD_LETTERS
from eventstore.errors import EventStoreError, RangeUnavailableError
from eventstore.log import JetStreamLog, StoredEvent
from eventstore.projection import SqliteProjection
from eventstore.reader import SEQ_HEADER
from eventstore.settings import EventStoreSettings
from schemas.names import BusNames

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
        events, row = await db.snapshot(session_id)
    finally:
        await db.close()
    return verify(session_id, events, row.last_seq if row else None)


async def audit_nats(settings: EventStoreSettings, session_id: str) -> AuditReport:
    """Audit a session from the live log (old ranges via the projector)."""
    try:
        nc = await nats.connect(
            [url.strip() for url in settings.nats_url.split(",")],
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
    dead = DEAD_LETTERS.of_session(log.names, session_id)
    return verify(session_id, events, head, dead)


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
        seq_text = (msg.headers or {}).get(SEQ_HEADER, "")
        seq = int(seq_text) if seq_text.isdigit() else 0  # 0: a dead letter
        if seq > after:
            return seq
        stream_seq = (msg.seq or 0) + 1
