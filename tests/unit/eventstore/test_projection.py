"""``SqliteProjection``: position and rows in one transaction; no bus needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore.audit_source import audit_db
from eventstore.errors import RangeUnavailableError
from eventstore.projection import Copied, DeadLetter, ProjectionError, SqliteProjection
from tests.unit.eventstore.test_audit import chain

STREAM = "T_LOG"


def copies(session_id: str = "s1", first_stream_seq: int = 1) -> list[Copied]:
    return [
        Copied(first_stream_seq + i, e.event(), e.raw)
        for i, e in enumerate(chain(session_id))
    ]


async def test_a_redelivered_batch_is_a_no_op(tmp_path: Path) -> None:
    db = await SqliteProjection.open(tmp_path / "p.db")
    batch = copies()
    assert len(await db.apply(STREAM, batch, batch[-1].stream_seq)) == 9
    assert await db.apply(STREAM, batch, batch[-1].stream_seq) == []
    assert [e.seq for e in await db.read("s1")] == list(range(1, 10))
    assert await db.position(STREAM) == 9
    await db.close()


async def test_a_partly_redelivered_batch_copies_only_the_new_part(
    tmp_path: Path,
) -> None:
    db = await SqliteProjection.open(tmp_path / "p.db")
    batch = copies()
    await db.apply(STREAM, batch[:4], 4)
    fresh = await db.apply(STREAM, batch[2:], 9)
    assert [c.event.seq for c in fresh] == [5, 6, 7, 8, 9]
    row = await db.session("s1")
    assert row is not None
    assert (row.device_id, row.title, row.last_seq) == ("dev1", "fix the build", 9)
    await db.close()


async def test_the_session_summary_survives_a_reopen(tmp_path: Path) -> None:
    db = await SqliteProjection.open(tmp_path / "p.db")
    batch = copies()
    await db.apply(STREAM, batch[:5], 5)
    await db.close()
    db = await SqliteProjection.open(tmp_path / "p.db")
    await db.apply(STREAM, batch[5:], 9)
    summary = await db.summary("s1")
    assert summary.last_seq == 9
    assert summary.resolved_permissions == frozenset({"r1"})
    assert summary.sandbox == "running"
    await db.close()


async def test_dead_letters_are_kept_and_move_the_position(tmp_path: Path) -> None:
    db = await SqliteProjection.open(tmp_path / "p.db")
    dead = DeadLetter(1, "t.log.x.1.y", "undecodable", b"\xff")
    await db.apply(STREAM, [dead, *copies(first_stream_seq=2)], 10)
    assert await db.dead_letters(STREAM) == [dead]
    assert await db.position(STREAM) == 10
    await db.close()


async def test_a_failed_transaction_leaves_neither_rows_nor_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = await SqliteProjection.open(tmp_path / "p.db")
    try:

        async def broken_fold(copied: list[Copied]) -> None:
            raise OSError("disk gone mid-transaction")

        monkeypatch.setattr(db, "_fold", broken_fold)
        with pytest.raises(OSError, match="disk gone"):
            await db.apply(STREAM, copies(), 9)
        assert await db.position(STREAM) == 0
        assert await db.read("s1") == []
    finally:
        await db.close()


async def test_reading_past_the_head_raises_range_unavailable(tmp_path: Path) -> None:
    db = await SqliteProjection.open(tmp_path / "p.db")
    await db.apply(STREAM, copies(), 9)
    with pytest.raises(RangeUnavailableError):
        await db.read("s1", 12)
    await db.close()


async def test_pages_are_bounded_by_bytes_but_never_empty(tmp_path: Path) -> None:
    db = await SqliteProjection.open(tmp_path / "p.db")
    await db.apply(STREAM, copies(), 9)
    events, last = await db.page("s1", 0, 100, max_bytes=1)
    assert [e.seq for e in events] == [1]
    assert last == 9
    await db.close()


async def test_a_missing_file_cannot_be_opened_read_only(tmp_path: Path) -> None:
    with pytest.raises(ProjectionError):
        await SqliteProjection.open(tmp_path / "nope.db", readonly=True)


@pytest.mark.timeout(30)
async def test_an_audit_is_not_fooled_by_a_batch_committed_while_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copier commits between the audit's reads (it is catching up): the
    audit sees one consistent state, not a row ahead of the events it read."""
    path = tmp_path / "p.db"
    writer = await SqliteProjection.open(path)
    batch = copies()
    await writer.apply(STREAM, batch[:4], 4)
    real_read, real_session = SqliteProjection.read, SqliteProjection.session
    committed: list[int] = []

    async def commit_once() -> None:
        if not committed:
            committed.append(9)
            await writer.apply(STREAM, batch[4:], 9)

    async def read(self: SqliteProjection, *args: object, **kw: object) -> object:
        events = await real_read(self, *args, **kw)  # type: ignore[arg-type]
        await commit_once()
        return events

    async def session(self: SqliteProjection, session_id: str) -> object:
        row = await real_session(self, session_id)
        await commit_once()
        return row

    monkeypatch.setattr(SqliteProjection, "read", read)
    monkeypatch.setattr(SqliteProjection, "session", session)
    report = await audit_db(str(path), "s1")
    assert committed, "the copier's commit did not land during the audit"
    assert report.ok, report.first_break
    assert report.events == 4
    monkeypatch.undo()
    assert (await audit_db(str(path), "s1")).events == 9
    await writer.close()
