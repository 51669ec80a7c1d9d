"""Workspace archives: round trip, incremental layers, rebuild from the archive."""

from __future__ import annotations

from collections.abc import Callable

from schemas.events import SessionClosed, TurnEnded
from services.broker.client import bind
from services.broker.feed import _handle
from services.envd import EnvdClient
from tests.integration.broker.harness import Harness

BINARY = bytes(range(256)) * 64

SETUP = (
    "cd /workspace && mkdir -p src/pkg empty/deeper && "
    "printf 'print(1)\\n' > src/pkg/run.py && chmod 751 src/pkg/run.py && "
    "chmod 700 empty && ln -s src/pkg/run.py link && ln -s ../outside esc"
)
SHOW = (
    "cd /workspace && stat -c '%n %a %F' src/pkg/run.py empty empty/deeper && "
    "readlink link esc && sha256sum blob.bin | cut -c1-16"
)


async def _client(
    harness: Harness, worker: str, sid: str
) -> tuple[Callable[[], EnvdClient], str]:
    token = await harness.assign(worker, sid)
    grant = await bind(harness.nc, harness.names, worker, token)

    def connect() -> EnvdClient:
        return EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token)

    return connect, grant.sandbox_id


async def test_archive_round_trip_keeps_bytes_modes_symlinks_and_empty_dirs(
    harness: Harness,
) -> None:
    broker = await harness.replica()
    connect, old = await _client(harness, "wa", "sa")
    async with connect() as client:
        await client.write_bytes("/workspace/blob.bin", BINARY)
        assert (await client.run(SETUP)).exit_code == 0
        before = (await client.run(SHOW)).stdout
    first = await broker.reaper.save("sa")
    assert first is not None
    async with connect() as client:
        await client.write_bytes("/workspace/src/new.txt", b"second")
        await client.remove("/workspace/link")
    second = await broker.reaper.save("sa")
    m = await broker.files.archiver.load(second or "")
    assert len(m.layers) == 2
    assert m.layers[1].paths == ["src", "src/new.txt"]
    async with connect() as client:
        await client.run("ln -s src/pkg/run.py /workspace/link")
    await broker.reaper.save("sa")
    assert await broker.reaper.pause("sa", "idle")
    assert await broker.reaper.archive("sa", "test")
    assert old not in await harness.ours(broker.life.provider)
    token = await harness.assign("wa2", "sa")
    grant = await bind(harness.nc, harness.names, "wa2", token)
    assert grant.rebuilt
    assert grant.notice
    assert "rebuilt" in grant.notice
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        assert (await c.run(SHOW)).stdout == before
        assert await c.read_bytes("/workspace/src/new.txt") == b"second"
        assert await c.read_bytes("/workspace/blob.bin") == BINARY


async def test_resume_failures_retry_then_rebuild_cold_from_the_archive(
    harness: Harness,
) -> None:
    broker = await harness.replica(broker_resume_attempts=3)
    connect, old = await _client(harness, "wr", "sr")
    async with connect() as client:
        await client.write_bytes("/workspace/keep.txt", b"kept")
    await broker.reaper.save("sr")
    assert await broker.reaper.pause("sr", "idle")
    harness.host.set_faults(fail_resumes=10, resume_status=500)
    token = await harness.assign("wr2", "sr")
    grant = await bind(harness.nc, harness.names, "wr2", token)
    harness.host.clear_faults()
    assert grant.sandbox_id != old
    assert grant.rebuilt
    async with EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token) as c:
        assert await c.read_bytes("/workspace/keep.txt") == b"kept"
    assert old not in await harness.ours(broker.life.provider)
    states = await harness.states("sr")
    assert ("running", "rebuilt from the archive") in states


async def test_a_sandbox_with_the_wrong_identity_is_refused_and_rebuilt(
    harness: Harness,
) -> None:
    broker = await harness.replica()
    _client_a, sbx_a = await _client(harness, "wi", "si")
    _, sbx_b = await _client(harness, "wj", "sj")
    harness.host.set_faults(swap={sbx_a: sbx_b})
    token = await harness.assign("wi2", "si")
    grant = await bind(harness.nc, harness.names, "wi2", token)
    assert grant.sandbox_id not in (sbx_a, sbx_b)
    rec = (await broker.life.store.get("si")).record
    assert rec.sandbox_id == grant.sandbox_id
    assert rec.rebuilt


async def test_turn_end_saves_and_session_close_deletes(harness: Harness) -> None:
    import asyncio

    from services.broker.feed import _consumer

    broker = await harness.replica()
    sub = await _consumer(harness.nc, harness.names, asyncio.Event())
    connect, sbx = await _client(harness, "wt", "st")
    async with connect() as client:
        await client.write_bytes("/workspace/a.txt", b"a")
    ended = await harness.log.append(
        "st", TurnEnded(turn_id="t1", stop_reason="end_turn"), actor="worker"
    )
    await _fetch_one(sub, harness, broker)
    assert (await broker.life.store.get("st")).record.last_archive
    closed = await harness.log.append("st", SessionClosed(), actor="gateway")
    assert ended.seq < closed.seq
    await _fetch_one(sub, harness, broker)
    rec = (await broker.life.store.get("st")).record
    assert rec.state == "deleted"
    assert sbx not in await harness.ours(broker.life.provider)


async def _fetch_one(sub: object, harness: Harness, broker: object) -> None:
    msgs = await sub.fetch(1, timeout=10)  # type: ignore[attr-defined]
    for msg in msgs:
        await _handle(msg, harness.names, broker.reaper)  # type: ignore[attr-defined]
