"""Two projector replicas on one SQLite file: one copies, the other takes over.

The copier lease (``services/projector/lease.py``) is checked by the name in
its key; the copy by the SQLite file itself: every event once, the hash chain
verifying, across a clean hand-over and across a SIGKILLed copier.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import msgspec
from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError, KeyNotFoundError

from eventstore.audit_source import audit_db
from eventstore.log import JetStreamLog
from eventstore.projection import SqliteProjection
from eventstore.settings import EventStoreSettings
from schemas.events import AgentMessage
from schemas.names import BusNames
from services.projector.lease import KEY
from services.projector.service import run
from tests.support.eventstore import open_log, script
from tests.support.eventually import eventually

ROOT = Path(__file__).resolve().parents[3]


async def _holder(nc: Client, names: BusNames) -> str | None:
    try:
        kv = await nc.jetstream().key_value(names.projector_lease_bucket)
        entry = await kv.get(KEY)
    except (BucketNotFoundError, KeyNotFoundError):  # not declared / held yet
        return None
    return entry.value.decode() if entry.value else None


async def _copied(db: str, sid: str, last: int) -> bool:
    projection = await SqliteProjection.open(db, readonly=True)
    try:
        return await projection.last_seq(sid) >= last
    finally:
        await projection.close()


async def _append(nc: Client, settings: EventStoreSettings, sid: str, n: int) -> None:
    log = await open_log(nc, settings)
    for payload in script(n):
        await log.append(sid, payload, actor="gateway")


async def test_one_replica_copies_and_the_other_takes_over_on_a_clean_stop(
    nc: Client, settings: EventStoreSettings
) -> None:
    settings = msgspec.structs.replace(settings, projector_lease_s=1.0)
    names = BusNames(settings.bus_prefix)
    await open_log(nc, settings)  # a writer declares the log; the projector reads
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    a = asyncio.create_task(run(settings, stop_a, replica="A"))
    await eventually(lambda: _is(nc, names, "A"))
    b = asyncio.create_task(run(settings, stop_b, replica="B"))
    await _append(nc, settings, "s_r", 30)
    await eventually(lambda: _copied(settings.projector_db, "s_r", 30))
    assert await _holder(nc, names) == "A"
    stop_a.set()
    await asyncio.wait_for(a, 10.0)
    await eventually(lambda: _is(nc, names, "B"))
    await _append(nc, settings, "s_r2", 20)
    await eventually(lambda: _copied(settings.projector_db, "s_r2", 20))
    stop_b.set()
    await asyncio.wait_for(b, 10.0)
    for sid, n in (("s_r", 30), ("s_r2", 20)):
        report = await audit_db(settings.projector_db, sid)
        assert report.ok, report.first_break
        assert report.events == n


async def test_a_sigkilled_copier_is_replaced_within_its_lease(
    nc: Client, settings: EventStoreSettings, tmp_path: Path
) -> None:
    names = BusNames(settings.bus_prefix)
    await open_log(nc, settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
    env |= {"AGENTBUS_BUS_PREFIX": settings.bus_prefix}
    env |= {"AGENTBUS_PROJECTOR_LEASE_S": "1.0"}
    argv = [sys.executable, "-m", "services.cli", "projector"]
    argv += ["--nats", settings.nats_url, "--db", settings.projector_db]
    with (tmp_path / "a.log").open("ab") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        await eventually(lambda: _is(nc, names, None, other_than="B"))
        stop_b = asyncio.Event()
        settings_b = msgspec.structs.replace(settings, projector_lease_s=1.0)
        b = asyncio.create_task(run(settings_b, stop_b, replica="B"))
        await _append(nc, settings, "s_k", 25)
        await eventually(lambda: _copied(settings.projector_db, "s_k", 25))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        await eventually(lambda: _is(nc, names, "B"))
        await _append(nc, settings, "s_k2", 25)
        await eventually(lambda: _copied(settings.projector_db, "s_k2", 25))
        stop_b.set()
        await asyncio.wait_for(b, 10.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for sid in ("s_k", "s_k2"):
        report = await audit_db(settings.projector_db, sid)
        assert report.ok, report.first_break
        assert report.events == 25


async def _is(
    nc: Client, names: BusNames, who: str | None, *, other_than: str = ""
) -> bool:
    holder = await _holder(nc, names)
    if who is None:
        return holder is not None and holder != other_than
    return holder == who


async def _position(db: str, stream: str) -> int:
    projection = await SqliteProjection.open(db, readonly=True)
    try:
        return await projection.position(stream)
    finally:
        await projection.close()


async def test_a_copier_sigkilled_mid_copy_leaves_no_gap_or_duplicate(
    nc: Client, settings: EventStoreSettings, tmp_path: Path
) -> None:
    """Kill the copier while it is behind and writers keep appending: the
    standby resumes from SQLite's position and the copy equals the log."""
    names = BusNames(settings.bus_prefix)
    log = await open_log(nc, settings)
    sids = [f"s_m{i}" for i in range(4)]
    for sid in sids:  # a backlog the copier is still working through at the kill
        await _append(nc, settings, sid, 150)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
    env |= {"AGENTBUS_BUS_PREFIX": settings.bus_prefix}
    env |= {"AGENTBUS_PROJECTOR_LEASE_S": "1.0", "AGENTBUS_PROJECTOR_BATCH": "4"}
    argv = [sys.executable, "-m", "services.cli", "projector"]
    argv += ["--nats", settings.nats_url, "--db", settings.projector_db]
    stop_b = asyncio.Event()
    settings_b = msgspec.structs.replace(settings, projector_lease_s=1.0)
    with (tmp_path / "a.log").open("ab") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        await eventually(lambda: _is(nc, names, None, other_than="B"))
        b = asyncio.create_task(run(settings_b, stop_b, replica="B"))
        more = asyncio.gather(*(_messages(log, sid, 60) for sid in sids))
        await eventually(
            lambda: _position(settings.projector_db, names.log_stream), timeout=20
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        behind = await _position(settings.projector_db, names.log_stream)
        await more
        head = (await nc.jetstream().stream_info(names.log_stream)).state.last_seq
        assert behind < head, "the copier was killed after it had caught up"
        await eventually(lambda: _is(nc, names, "B"))
        await eventually(lambda: _copied(settings.projector_db, sids[-1], 210), 30)
        for sid in sids:
            await eventually(lambda sid=sid: _copied(settings.projector_db, sid, 210))
        stop_b.set()
        await asyncio.wait_for(b, 10.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for sid in sids:
        report = await audit_db(settings.projector_db, sid)
        assert report.ok, (sid, report.first_break)
        assert report.events == 210
        copy = await _read_copy(settings.projector_db, sid)
        assert copy == [e.raw for e in await log.read(sid)]


async def _messages(log: JetStreamLog, sid: str, n: int) -> None:
    for i in range(n):
        await log.append(sid, AgentMessage(turn_id="t", text=str(i)), actor="pool")


async def _read_copy(db: str, sid: str) -> list[bytes]:
    projection = await SqliteProjection.open(db, readonly=True)
    try:
        return [e.raw for e in await projection.read(sid)]
    finally:
        await projection.close()
