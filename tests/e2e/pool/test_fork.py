"""Forking a session at a mid-session seq, through the real gateway and broker."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import aiohttp

from eventstore.audit_source import audit_nats
from eventstore.settings import EventStoreSettings
from schemas.events import SessionForked, ToolCall, ToolResult, TurnEnded
from services.broker.archive import Archiver, JetStreamArchiveStore
from services.broker.forks import save_at
from services.broker.settings import BrokerSettings
from services.common.natsserver import NatsServerProcess
from tests.integration.gateway.conftest import auth, create_session, start_gateway
from tests.integration.pool.harness import Harness


def bash(command: str) -> dict[str, Any]:
    return {"tool": "bash", "args": {"command": command}}


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool": "write", "args": {"path": path, "content": content}}


async def last_output(e2e: Harness, sid: str) -> str:
    events = await e2e.events(sid)
    return [e.data for e in events if isinstance(e.data, ToolResult)][-1].output


async def audited(e2e: Harness, sid: str) -> bool:
    settings = EventStoreSettings(nats_url=e2e.url, bus_prefix=e2e.names.prefix)
    report = await audit_nats(settings, sid)
    return report.ok


async def test_fork_mid_session_then_both_go_on_independently(
    e2e: Harness, nats_server: NatsServerProcess, tmp_path: Path
) -> None:
    await e2e.pool(pool_workers=2)
    gw = await start_gateway(nats_server.url, e2e.names.prefix, tmp_path / "gw")
    e2e.stack.callback(gw.stop)
    http = await e2e.stack.enter_async_context(aiohttp.ClientSession())
    sid = await create_session(http, gw, "d1", title="parent")
    _, first = await e2e.script(sid, write("a.txt", "one\n"))
    end1 = await e2e.ended(sid, first, timeout=60)
    # Turn 1's save is indexed (it is taken before turn.ended, the index is
    # written when the broker sees that event).
    store = await JetStreamArchiveStore.open(e2e.nc.jetstream(), e2e.names)
    await e2e.until_async(lambda: _saved(store, sid, end1.seq), timeout=60)
    _, second = await e2e.script(sid, write("a.txt", "two\n"), write("b.txt", "b\n"))
    await e2e.ended(sid, second, timeout=60)
    mid = await e2e.wait_for(
        sid, lambda e: isinstance(e.data, ToolCall) and e.data.turn_id == second
    )

    url = f"{gw.base}/v1/sessions/{sid}/fork"
    async with http.post(url, json={"at_seq": mid.seq}, headers=auth("d2")) as r:
        assert r.status == 404  # another device's session does not exist for it
    async with http.post(url, json={"at_seq": 10_000}, headers=auth("d1")) as r:
        assert r.status == 422
        assert (await r.json())["error"]["field"] == "$.at_seq"
    async with http.post(url, json={"at_seq": mid.seq}, headers=auth("d1")) as r:
        assert r.status == 201, await r.text()
        fork = await r.json()
    fid = fork["session_id"]
    assert fid != sid
    assert fork["title"] == "parent (fork)"
    assert fork["status"] == "idle"

    events = await e2e.events(fid)
    forked = events[1].data
    assert isinstance(forked, SessionForked)
    assert forked.parent_session_id == sid
    assert forked.at_seq == mid.seq
    assert forked.conversation_seq == end1.seq
    assert forked.workspace_seq == end1.seq
    assert forked.workspace_manifest
    copied = [e.data for e in events[2:]]
    assert isinstance(copied[-1], TurnEnded)
    assert copied[-1].turn_id == first
    assert not any(getattr(d, "turn_id", None) == second for d in copied)

    # Both go on: their workspaces diverge.
    _, f_turn = await e2e.script(fid, bash("cat a.txt; ls"), write("c.txt", "c\n"))
    assert (await e2e.ended(fid, f_turn, timeout=90)).data.stop_reason == "end_turn"
    f_events = await e2e.events(fid)
    f_results = [e.data for e in f_events if isinstance(e.data, ToolResult)]
    # (after the notice that the fork's computer was built from an archive)
    assert f_results[-2].output.endswith("\n\none\na.txt\n")
    _, p_turn = await e2e.script(sid, bash("cat a.txt; ls"))
    assert (await e2e.ended(sid, p_turn, timeout=60)).data.stop_reason == "end_turn"
    assert await last_output(e2e, sid) == "two\na.txt\nb.txt\n"
    _, f_again = await e2e.script(fid, bash("ls"))
    await e2e.ended(fid, f_again, timeout=60)
    assert await last_output(e2e, fid) == "a.txt\nc.txt\n"
    assert await audited(e2e, sid)
    assert await audited(e2e, fid)
    parent_types = [e.type for e in await e2e.events(sid)]
    assert "session.forked" not in parent_types


async def _saved(store: JetStreamArchiveStore, sid: str, seq: int) -> bool:
    found = await save_at(store, sid, seq)
    return found is not None and found[1] == seq


async def test_a_turn_end_save_holds_exactly_that_turns_workspace(
    e2e: Harness,
) -> None:
    """The next turn, queued, starts at once: its first write must not be in
    the save of the turn before (the save is taken before ``turn.ended``)."""
    await e2e.pool()
    sid = await e2e.session()
    _, first = await e2e.script(sid, write("a.txt", "one\n"))
    _, second = await e2e.script(sid, write("a.txt", "two\n"))
    end1 = await e2e.ended(sid, first, timeout=60)
    end2 = await e2e.ended(sid, second, timeout=60)
    store = await JetStreamArchiveStore.open(e2e.nc.jetstream(), e2e.names)
    await e2e.until_async(lambda: _saved(store, sid, end2.seq), timeout=60)
    archiver = Archiver(store, None, BrokerSettings())  # type: ignore[arg-type]
    for end, text in ((end1, b"one\n"), (end2, b"two\n")):
        found = await save_at(store, sid, end.seq)
        assert found is not None
        assert found[1] == end.seq
        sink = io.BytesIO()
        await archiver.extract(await archiver.load(found[0]), "a.txt", sink)
        assert sink.getvalue() == text, f"the save of seq {end.seq}"
