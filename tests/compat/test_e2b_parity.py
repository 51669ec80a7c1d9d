"""E2B parity (issue 11) through the unmodified async SDK (runs with 2.63 and 2.45).

Snapshots, fork, lifecycle options, metrics, listing filters, file details and
the kill message — each against the real sandbox host.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.metadata
import json
import os
import secrets
import urllib.error
import urllib.request

import pytest
from e2b import AsyncSandbox, SandboxQuery, SandboxState
from e2b.exceptions import SandboxException, SandboxNotFoundException


def _raw_detail(sandbox_id: str) -> dict[str, object]:
    """``GET /sandboxes/{id}`` as JSON (fields the SDK does not surface)."""
    req = urllib.request.Request(
        f"{os.environ['E2B_API_URL']}/sandboxes/{sandbox_id}",
        headers={"X-API-KEY": os.environ["E2B_API_KEY"]},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        body: dict[str, object] = json.loads(resp.read())
    return body


SDK = tuple(int(x) for x in importlib.metadata.version("e2b").split(".")[:2])


async def until_true(probe, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    """Poll an async condition (no blind sleeps)."""
    async with asyncio.timeout(timeout):
        while not await probe():
            await asyncio.sleep(0.05)


# --- snapshots and fork ---


async def test_snapshot_create_list_start_from_and_delete() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.files.write("/workspace/state.txt", "before")
        name = f"snap-{secrets.token_hex(4)}"
        snap = await sbx.create_snapshot(name=name)
        assert snap.names == [name]
        await sbx.files.write("/workspace/state.txt", "after")
        listed = await sbx.list_snapshots().next_items()
        assert [s.snapshot_id for s in listed] == [snap.snapshot_id]
        by_id = await AsyncSandbox.create(template=snap.snapshot_id, timeout=60)
        by_name = await AsyncSandbox.create(template=name, timeout=60)
        try:
            assert await by_id.files.read("/workspace/state.txt") == "before"
            await by_id.files.write("/workspace/state.txt", "child")
            assert await by_name.files.read("/workspace/state.txt") == "before"
            assert await sbx.files.read("/workspace/state.txt") == "after"
            done = await by_id.commands.run("cat /workspace/state.txt")
            assert done.stdout == "child"
        finally:
            await by_id.kill()
            await by_name.kill()
        assert await AsyncSandbox.delete_snapshot(snap.snapshot_id) is True
        assert await AsyncSandbox.delete_snapshot(snap.snapshot_id) is False
        assert await sbx.list_snapshots().next_items() == []
    finally:
        await sbx.kill()


async def test_snapshot_of_a_paused_sandbox_and_listing_pages() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.files.write("/workspace/p.txt", "paused state")
        await sbx.pause()
        first = await AsyncSandbox.create_snapshot(sbx.sandbox_id)
        second = await AsyncSandbox.create_snapshot(sbx.sandbox_id)
        pager = AsyncSandbox.list_snapshots(sandbox_id=sbx.sandbox_id, limit=1)
        seen = []
        while pager.has_next:
            seen += [s.snapshot_id for s in await pager.next_items()]
        assert seen == [first.snapshot_id, second.snapshot_id]
        child = await AsyncSandbox.create(template=second.snapshot_id, timeout=60)
        try:
            assert await child.files.read("/workspace/p.txt") == "paused state"
        finally:
            await child.kill()
        resumed = await AsyncSandbox.connect(sbx.sandbox_id)
        assert await resumed.files.read("/workspace/p.txt") == "paused state"
    finally:
        await sbx.kill()


async def test_fork_copies_files_not_processes_and_children_are_independent() -> None:
    sbx = await AsyncSandbox.create(timeout=120, metadata={"role": "parent"})
    try:
        await sbx.files.write("/workspace/f.txt", "parent")
        forks = await sbx.fork(count=2)
        assert len(forks) == 2
        ids = {f.sandbox_id for f in forks}
        assert sbx.sandbox_id not in ids
        assert len(ids) == 2
        try:
            await forks[0].files.write("/workspace/f.txt", "fork 0")
            assert await forks[1].files.read("/workspace/f.txt") == "parent"
            assert await sbx.files.read("/workspace/f.txt") == "parent"
            info = await forks[1].get_info()
            assert info.metadata == {"role": "parent"}
        finally:
            for child in forks:
                await child.kill()
        with pytest.raises(SandboxNotFoundException):
            await AsyncSandbox.fork("nosuchsandbox0000000")
    finally:
        await sbx.kill()


# --- lifecycle ---


async def test_on_timeout_pause_then_auto_resume_on_envd_request() -> None:
    sbx = await AsyncSandbox.create(
        timeout=1, lifecycle={"on_timeout": "pause", "auto_resume": True}
    )
    try:
        await sbx.files.write("/workspace/k.txt", "kept")

        async def paused() -> bool:
            return (await sbx.get_info()).state == SandboxState.PAUSED

        await until_true(paused)
        # An envd request wakes it (auto-resume); files are still there.
        assert await sbx.files.read("/workspace/k.txt") == "kept"
        assert (await sbx.get_info()).state == SandboxState.RUNNING
    finally:
        await sbx.kill()


async def test_on_timeout_pause_without_memory_is_a_filesystem_pause() -> None:
    key = "mode" if SDK >= (2, 46) else "keep_memory"
    value: object = "filesystem" if key == "mode" else False
    sbx = await AsyncSandbox.create(
        timeout=1, lifecycle={"on_timeout": {"action": "pause", key: value}}
    )
    try:

        async def paused() -> bool:
            return (await sbx.get_info()).state == SandboxState.PAUSED

        await until_true(paused)
        assert _raw_detail(sbx.sandbox_id)["pauseMode"] == "filesystem"
    finally:
        await sbx.kill()


@pytest.mark.skipif(SDK < (2, 46), reason="on_resume arrived after 2.45")
async def test_connect_with_reboot_resumes_with_fresh_processes() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.files.write("/workspace/r.txt", "files stay")
        await sbx.commands.run("sleep 300", background=True, timeout=0)
        await sbx.pause()
        again = await AsyncSandbox.connect(sbx.sandbox_id, on_resume="reboot")
        assert await again.commands.list() == []
        assert await again.files.read("/workspace/r.txt") == "files stay"
        assert _raw_detail(sbx.sandbox_id)["state"] == "running"
    finally:
        await sbx.kill()


# --- metrics ---


async def test_get_metrics_reports_cpu_memory_and_disk() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.commands.run("head -c 3000000 /dev/urandom > /workspace/blob")
        # Samples are periodic: one taken while the file was written is stale.
        latest: list = []  # type: ignore[type-arg]

        async def sampled_after_write() -> bool:
            latest[:] = await sbx.get_metrics()
            return bool(latest) and latest[-1].disk_used >= 3_000_000

        await until_true(sampled_after_write)
        last = latest[-1]
        assert last.cpu_count >= 1
        assert 0 <= last.cpu_used_pct <= 100
        assert last.mem_total > 0
        assert last.mem_used > 0
        assert last.disk_total > last.disk_used
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        assert await sbx.get_metrics(start=later) == []
    finally:
        await sbx.kill()


# --- listing ---


async def test_list_filters_template_started_after_and_pages_running_and_paused() -> (
    None
):
    tag = secrets.token_hex(6)
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    made = [
        await AsyncSandbox.create(timeout=120, metadata={"suite": tag, "n": str(i)})
        for i in range(3)
    ]
    try:
        await made[1].pause()
        query = SandboxQuery(
            metadata={"suite": tag},
            state=[SandboxState.RUNNING, SandboxState.PAUSED],
            started_after=before,
            template="base",
        )
        pager = AsyncSandbox.list(query=query, limit=2)
        seen = []
        while pager.has_next:
            seen += await pager.next_items()
        assert sorted(s.sandbox_id for s in seen) == sorted(s.sandbox_id for s in made)
        states = {s.sandbox_id: s.state for s in seen}
        assert states[made[1].sandbox_id] == SandboxState.PAUSED
        later = SandboxQuery(
            metadata={"suite": tag},
            started_after=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5),
        )
        assert await AsyncSandbox.list(query=later).next_items() == []
        other = SandboxQuery(metadata={"suite": tag}, template="no-such-template")
        assert await AsyncSandbox.list(query=other).next_items() == []
    finally:
        for sbx in made:
            await sbx.kill()


# --- files ---


async def test_file_details_match_envd() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.files.make_dir("/workspace/dir")
        assert (await sbx.files.get_info("/workspace/dir")).mode == 0o755
        await sbx.files.write("/workspace/dir/target.txt", "t")
        await sbx.commands.run("ln -s dir/target.txt /workspace/rel-link")
        info = await sbx.files.get_info("/workspace/rel-link")
        assert info.symlink_target == "/workspace/dir/target.txt"
        await sbx.files.write("/workspace/dir/m.txt", "m", metadata={"owner": "me"})
        assert (await sbx.files.get_info("/workspace/dir/m.txt")).metadata == {
            "owner": "me"
        }
        entries = {e.name: e for e in await sbx.files.list("/workspace/dir")}
        assert entries["m.txt"].metadata == {"owner": "me"}
        url = sbx.download_url("/workspace/dir/m.txt", use_signature_expiration=-60)
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(url, timeout=10)
        assert caught.value.code == 401
        assert "signature is already expired" in caught.value.read().decode()
    finally:
        await sbx.kill()


# --- kill during a command ---


async def test_kill_during_a_command_ends_it_with_e2b_end_of_life_message() -> None:
    sbx = await AsyncSandbox.create(timeout=120)
    handle = await sbx.commands.run("sleep 60", background=True, timeout=0)
    await AsyncSandbox.kill(sbx.sandbox_id)
    with pytest.raises(SandboxException) as caught:
        await handle.wait()
    assert "killed or reached its end of life" in str(caught.value)
