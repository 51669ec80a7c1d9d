"""``SqliteProjection``: the long-term copy of every session log, in SQLite (WAL).

``events`` is keyed by ``(session_id, seq)``; ``positions`` holds the last stream
seq copied, written in the same transaction as the rows it covers, so a
redelivered batch is a no-op. ``sessions`` keeps one folded summary per session
for audit queries; ``dead_letters`` keeps what was on a log subject but was not
one of our events.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import aiosqlite
import msgspec

from eventstore.errors import EventStoreError, RangeUnavailableError
from eventstore.fold import SessionSummary, evolve
from eventstore.log import StoredEvent
from schemas.events import Event
from schemas.ids import now_rfc3339

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    id TEXT NOT NULL,
    ts TEXT NOT NULL,
    stream_seq INTEGER NOT NULL,
    raw BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    device_id TEXT NOT NULL,
    title TEXT NOT NULL,
    created_at TEXT NOT NULL,
    status TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    summary BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_device ON sessions (device_id, created_at);
CREATE TABLE IF NOT EXISTS positions (
    stream TEXT PRIMARY KEY,
    stream_seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS dead_letters (
    stream TEXT NOT NULL,
    stream_seq INTEGER NOT NULL,
    subject TEXT NOT NULL,
    reason TEXT NOT NULL,
    data BLOB NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (stream, stream_seq)
);
"""

_SUMMARY = msgspec.json.Decoder(SessionSummary)


def _blob(value: bytes | str) -> bytes:
    """Stored bytes; SQLite's dynamic typing lets an edited row come back as TEXT."""
    return value.encode() if isinstance(value, str) else bytes(value)


def _target(path: str, readonly: bool) -> str:
    """A read-only URI, or the path (its directory created) for writing."""
    if readonly:
        # Checked here: a failed aiosqlite connect leaves its thread posting to
        # a loop that may be gone by then (``asyncio.run`` in the CLI).
        if not Path(path).is_file():
            raise ProjectionError(path, "no such file")
        return Path(path).resolve().as_uri() + "?mode=ro"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return path


class ProjectionError(EventStoreError):
    """The SQLite file cannot be opened or is not a projection."""

    def __init__(self, path: str, cause: str) -> None:
        self.path = path
        super().__init__(f"projection {path}: {cause}")


class Copied(NamedTuple):
    """One event to copy: where it was in the stream, and what it is."""

    stream_seq: int
    event: Event
    raw: bytes


class DeadLetter(NamedTuple):
    """A message on a log subject that is not one of our events."""

    stream_seq: int
    subject: str
    reason: str
    data: bytes


class SessionRow(NamedTuple):
    """One row of ``sessions``."""

    session_id: str
    device_id: str
    title: str
    created_at: str
    status: str
    last_seq: int


class SqliteProjection:
    """Write side (the projector) and read side (range reads, audit) of the copy."""

    def __init__(self, db: aiosqlite.Connection, path: str) -> None:
        self._db = db
        self.path = path
        # Summaries as committed; loaded from ``sessions`` on first touch.
        self._summaries: dict[str, SessionSummary] = {}

    @classmethod
    async def open(
        cls, path: str | Path, *, readonly: bool = False
    ) -> SqliteProjection:
        """Open (and, for writing, create) the file; WAL so readers never block."""
        where = str(path)
        try:
            target = _target(where, readonly)
            db = await aiosqlite.connect(target, uri=readonly, isolation_level=None)
            if not readonly:
                await db.execute("PRAGMA journal_mode=WAL")
                await db.execute("PRAGMA synchronous=NORMAL")
                await db.executescript(SCHEMA)
            await db.execute("PRAGMA busy_timeout=5000")
        except sqlite3.Error as exc:
            raise ProjectionError(where, str(exc)) from exc
        return cls(db, where)

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        await self._db.close()

    # --- write side ---------------------------------------------------------------

    async def position(self, stream: str) -> int:
        """The last stream seq copied from ``stream`` (0 if none)."""
        async with self._db.execute(
            "SELECT stream_seq FROM positions WHERE stream = ?", (stream,)
        ) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def reset_position(self, stream: str) -> None:
        """Forget the position (the stream was re-created; its seqs start again)."""
        await self._db.execute("DELETE FROM positions WHERE stream = ?", (stream,))

    async def apply(
        self, stream: str, batch: Sequence[Copied | DeadLetter], upto: int
    ) -> list[Copied]:
        """Copy a batch and move the position to ``upto``, in one transaction.

        Items at or below the recorded position were copied before (a
        redelivery) and are skipped; returns the events actually copied.
        """
        await self._db.execute("BEGIN IMMEDIATE")
        try:
            done = await self.position(stream)
            fresh = [item for item in batch if item.stream_seq > done]
            copied = [item for item in fresh if isinstance(item, Copied)]
            summaries = await self._write(stream, fresh, copied)
            await self._db.execute(
                "INSERT INTO positions (stream, stream_seq) VALUES (?, ?) "
                "ON CONFLICT (stream) DO UPDATE SET stream_seq = excluded.stream_seq "
                "WHERE excluded.stream_seq > positions.stream_seq",
                (stream, upto),
            )
            await self._db.execute("COMMIT")
        except BaseException:
            await self._db.execute("ROLLBACK")
            raise
        self._summaries.update(summaries)
        return copied

    async def _write(
        self, stream: str, fresh: list[Copied | DeadLetter], copied: list[Copied]
    ) -> dict[str, SessionSummary]:
        await self._db.executemany(
            "INSERT OR IGNORE INTO events "
            "(session_id, seq, type, id, ts, stream_seq, raw) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (e.session_id, e.seq, e.type, e.id, e.ts, c.stream_seq, c.raw)
                for c in copied
                for e in (c.event,)
            ],
        )
        now = now_rfc3339()
        await self._db.executemany(
            "INSERT OR IGNORE INTO dead_letters "
            "(stream, stream_seq, subject, reason, data, recorded_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (stream, d.stream_seq, d.subject, d.reason, d.data, now)
                for d in fresh
                if isinstance(d, DeadLetter)
            ],
        )
        summaries = await self._fold(copied)
        await self._db.executemany(
            "INSERT OR REPLACE INTO sessions "
            "(session_id, device_id, title, created_at, status, last_seq, summary) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (sid, s.device_id, s.title, s.created_at, s.status, s.last_seq, enc)
                for sid, s in summaries.items()
                for enc in (msgspec.json.encode(s),)
            ],
        )
        return summaries

    async def _fold(self, copied: list[Copied]) -> dict[str, SessionSummary]:
        summaries: dict[str, SessionSummary] = {}
        for item in copied:
            sid = item.event.session_id
            current = summaries.get(sid) or await self.summary(sid)
            if item.event.seq > current.last_seq:  # each event folds once
                summaries[sid] = evolve(current, item.event)
        return summaries

    async def summary(self, session_id: str) -> SessionSummary:
        """The folded summary of a session as committed (empty if unknown)."""
        cached = self._summaries.get(session_id)
        if cached is not None:
            return cached
        async with self._db.execute(
            "SELECT summary FROM sessions WHERE session_id = ?", (session_id,)
        ) as cur:
            row = await cur.fetchone()
        return _SUMMARY.decode(row[0]) if row else SessionSummary()

    # --- read side ----------------------------------------------------------------

    async def read(
        self, session_id: str, after: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        """The events after ``after`` in seq order (at most ``limit``).

        A cursor past the session's last event raises
        :class:`RangeUnavailableError` (``cursor_ahead``), as the live log does.
        """
        events, last = await self.page(session_id, after, limit)
        if not events and after > last:
            raise RangeUnavailableError(
                session_id, after, 1 if last else 0, last, "cursor_ahead"
            )
        return events

    async def page(
        self,
        session_id: str,
        after: int,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> tuple[list[StoredEvent], int]:
        """Events after ``after`` (bounded by count and bytes) and the last seq."""
        events: list[StoredEvent] = []
        size = 0
        async with self._db.execute(
            "SELECT seq, type, raw FROM events WHERE session_id = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (session_id, after, -1 if limit is None else limit),
        ) as cur:
            async for seq, type_, raw in cur:
                size += len(raw)
                if events and max_bytes is not None and size > max_bytes:
                    break
                events.append(StoredEvent(int(seq), str(type_), _blob(raw)))
        return events, await self.last_seq(session_id)

    async def last_seq(self, session_id: str) -> int:
        """The highest seq copied for a session (0 if none)."""
        async with self._db.execute(
            "SELECT MAX(seq) FROM events WHERE session_id = ?", (session_id,)
        ) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    async def session(self, session_id: str) -> SessionRow | None:
        """The ``sessions`` row of a session."""
        async with self._db.execute(
            "SELECT session_id, device_id, title, created_at, status, last_seq "
            "FROM sessions WHERE session_id = ?",
            (session_id,),
        ) as cur:
            row = await cur.fetchone()
        return SessionRow(*row) if row else None

    async def snapshot(
        self, session_id: str
    ) -> tuple[list[StoredEvent], SessionRow | None]:
        """A session's events and its ``sessions`` row, read in one transaction.

        Two separate reads race the copier: a batch committed between them
        makes the row name a ``last_seq`` the events read before it lack,
        which an audit would report as a gap (seen in the chaos run while the
        projector caught up after a restart).
        """
        await self._db.execute("BEGIN")
        try:
            row = await self.session(session_id)
            events = await self.read(session_id)
        finally:
            await self._db.execute("COMMIT")
        return events, row

    async def dead_letters(self, stream: str) -> list[DeadLetter]:
        """Messages that were not our events, in stream order."""
        async with self._db.execute(
            "SELECT stream_seq, subject, reason, data FROM dead_letters "
            "WHERE stream = ? ORDER BY stream_seq",
            (stream,),
        ) as cur:
            rows = await cur.fetchall()
        return [DeadLetter(int(r[0]), str(r[1]), str(r[2]), bytes(r[3])) for r in rows]
