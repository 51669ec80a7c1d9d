"""``agentbus audit`` against live NATS and against the SQLite file alone."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nats.aio.client import Client

from eventstore.log import StoredEvent
from eventstore.projection import SqliteProjection
from eventstore.reader import SEQ_HEADER, TYPE_HEADER
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.names import BusNames
from services.audit_cli import parser, run_audit
from tests.support.eventstore import (
    append_script,
    local_projector,
    open_log,
)
from tests.unit.eventstore.test_audit import chain

ROOT = Path(__file__).resolve().parents[3]


def _args(session: str, *flags: str) -> argparse.Namespace:
    return parser().parse_args([session, *flags])


def _removed(events: list[StoredEvent]) -> list[StoredEvent]:
    return [e for e in events if e.seq != 4]


def _reordered(events: list[StoredEvent]) -> list[StoredEvent]:
    out = list(events)
    a, b = out[3], out[4]
    out[3], out[4] = StoredEvent(4, b.type, b.raw), StoredEvent(5, a.type, a.raw)
    return out


def _altered(events: list[StoredEvent]) -> list[StoredEvent]:
    out = list(events)
    raw = out[3].raw.replace(b'"pytest"', b'"rm -rf /"')
    assert raw != out[3].raw
    out[3] = StoredEvent(4, out[3].type, raw)
    return out


CORRUPTIONS = {
    "removed": (_removed, 4, "missing seq 4 (next stored is 5)"),
    "reordered": (_reordered, 4, "envelope seq 5 stored at seq 4"),
    "altered": (_altered, 5, "digest of seq 4"),
}

NATS_PROBLEMS = {
    "reordered": "dead letter at stream seq 4 (",
}


async def _publish_raw(
    nc: Client, settings: EventStoreSettings, events: list[StoredEvent], sid: str
) -> None:
    """Write a log straight onto a scratch stream, bypassing the append path."""
    names = BusNames(settings.bus_prefix)
    js = nc.jetstream()
    await ensure_log_stream(js, names, settings)
    for e in events:
        await js.publish(
            names.log_subject(sid, e.seq, e.type),
            e.raw,
            headers={SEQ_HEADER: str(e.seq), TYPE_HEADER: e.type},
        )


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
async def test_audit_over_nats_names_the_first_break(
    nc: Client,
    settings: EventStoreSettings,
    kind: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    corrupt, seq, problem = CORRUPTIONS[kind]
    # Over NATS an envelope whose seq disagrees with its subject is not read
    # as an event at all: it is a dead letter, named by its stream position.
    problem = NATS_PROBLEMS.get(kind, problem)
    await _publish_raw(nc, settings, corrupt(chain("s1")), "s1")
    assert await run_audit(_args("s1", "--json"), settings) == 1
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["ok"] is False
    assert report["first_break"]["seq"] == seq
    assert problem in report["first_break"]["problem"]
    assert f"break at seq {seq}" in err


async def test_audit_over_nats_of_a_clean_session_exits_zero(
    nc: Client, settings: EventStoreSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    log = await open_log(nc, settings)
    await append_script(log, "s_clean", 13)
    assert await run_audit(_args("s_clean"), settings) == 0
    out = capsys.readouterr().out
    assert "OK: seqs contiguous, hash chain verifies" in out
    assert "user [t]: list files" in out
    assert "tool call c: bash" in out


async def _corrupt_copy(db_path: str, sid: str, kind: str) -> None:
    """Apply a corruption to the SQLite copy itself (what an attacker with disk
    access, or a bad restore, would do)."""
    db = await SqliteProjection.open(db_path)
    conn = db._db
    try:
        if kind == "removed":
            await conn.execute(
                "DELETE FROM events WHERE session_id = ? AND seq = 4", (sid,)
            )
        elif kind == "reordered":
            await conn.execute(
                "UPDATE events SET seq = -seq WHERE session_id = ? AND seq IN (4, 5)",
                (sid,),
            )
            await conn.execute(
                "UPDATE events SET seq = 9 - seq WHERE session_id = ? AND seq < 0",
                (sid,),
            )
        else:
            await conn.execute(
                "UPDATE events SET raw = replace(raw, 'list files', 'rm -rf /') "
                "WHERE session_id = ? AND seq = 2",
                (sid,),
            )
    finally:
        await db.close()


@pytest.mark.parametrize(
    ("kind", "seq"), [("removed", 4), ("reordered", 4), ("altered", 3)]
)
async def test_audit_of_the_sqlite_file_alone_names_the_first_break(
    nc: Client,
    settings: EventStoreSettings,
    kind: str,
    seq: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = await open_log(nc, settings)
    await append_script(log, "s_db", 9)
    async with local_projector(nc, settings) as local:
        await local.sync()
    db = settings.projector_db
    assert await run_audit(_args("s_db", "--db", db, "--json"), settings) == 0
    capsys.readouterr()
    await _corrupt_copy(db, "s_db", kind)
    assert await run_audit(_args("s_db", "--db", db, "--json"), settings) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["first_break"]["seq"] == seq


async def test_audit_cli_exit_codes_as_a_process(
    nc: Client, settings: EventStoreSettings
) -> None:
    """``agentbus audit``: 0 clean, 1 broken (naming the seq), 2 unreachable."""
    log = await open_log(nc, settings)
    await append_script(log, "s_ok", 5)
    await _publish_raw(nc, settings, _removed(chain("s_bad")), "s_bad")
    env = {**os.environ, "AGENTBUS_BUS_PREFIX": settings.bus_prefix}

    async def audit(*argv: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "services.cli", "audit", *argv]
        return await asyncio.to_thread(
            subprocess.run, cmd, cwd=ROOT, env=env, capture_output=True, text=True
        )

    ok, bad, missing = await asyncio.gather(
        audit("s_ok", "--nats", settings.nats_url),
        audit("s_bad", "--nats", settings.nats_url),
        audit("s_ok", "--db", str(Path(settings.projector_db).parent / "none.db")),
    )
    assert ok.returncode == 0, ok.stderr
    assert bad.returncode == 1
    assert "break at seq 4: missing seq 4 (next stored is 5)" in bad.stderr
    assert missing.returncode == 2
