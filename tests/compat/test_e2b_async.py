"""The unmodified async e2b SDK against the sandbox host (runs with 2.63 and 2.45)."""

from __future__ import annotations

import io
import secrets
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest
from e2b import (
    AsyncSandbox,
    CommandExitException,
    FilesystemEventType,
    SandboxQuery,
    SandboxState,
)
from e2b.exceptions import (
    FileNotFoundException,
    InvalidArgumentException,
    TimeoutException,
)
from e2b.sandbox.commands.command_handle import PtySize
from e2b.sandbox.filesystem.filesystem import FileType, WriteEntry

from tests.support.eventually import eventually


@pytest.fixture(scope="module")
async def sbx() -> AsyncIterator[AsyncSandbox]:
    """One sandbox shared by the file and command tests of this module."""
    sandbox = await AsyncSandbox.create(timeout=300, envs={"SBX_LEVEL": "sandbox"})
    yield sandbox
    await sandbox.kill()


# --- files -----------------------------------------------------------------------


async def test_write_then_read_text_and_bytes(sbx: AsyncSandbox) -> None:
    info = await sbx.files.write("/workspace/hello.txt", "hello wörld\n")
    assert info.path == "/workspace/hello.txt"
    assert await sbx.files.read("/workspace/hello.txt") == "hello wörld\n"
    blob = bytes(range(256)) * 10
    await sbx.files.write("/workspace/blob.bin", blob)
    assert await sbx.files.read("/workspace/blob.bin", format="bytes") == blob


async def test_relative_paths_resolve_against_home(sbx: AsyncSandbox) -> None:
    await sbx.files.write("notes/rel.txt", "rel")
    assert await sbx.files.read("/home/user/notes/rel.txt") == "rel"


async def test_write_files_writes_several_files_in_one_request(
    sbx: AsyncSandbox,
) -> None:
    infos = await sbx.files.write_files(
        [
            WriteEntry(path="/workspace/multi/a.txt", data="A"),
            WriteEntry(path="/workspace/multi/b.txt", data=b"B"),
        ]
    )
    assert sorted(i.path for i in infos) == [
        "/workspace/multi/a.txt",
        "/workspace/multi/b.txt",
    ]
    assert await sbx.files.read("/workspace/multi/b.txt") == "B"


async def test_list_exists_get_info_describe_entries(sbx: AsyncSandbox) -> None:
    await sbx.files.write("/workspace/tree/sub/leaf.txt", "x")
    top = await sbx.files.list("/workspace/tree")
    assert [(e.name, e.type) for e in top] == [("sub", FileType.DIR)]
    deep = await sbx.files.list("/workspace/tree", depth=2)
    assert {e.path for e in deep} == {
        "/workspace/tree/sub",
        "/workspace/tree/sub/leaf.txt",
    }
    assert await sbx.files.exists("/workspace/tree/sub/leaf.txt")
    assert not await sbx.files.exists("/workspace/tree/nope")
    info = await sbx.files.get_info("/workspace/tree/sub/leaf.txt")
    assert (info.size, info.type, info.owner) == (1, FileType.FILE, "user")


async def test_make_dir_rename_remove(sbx: AsyncSandbox) -> None:
    assert await sbx.files.make_dir("/workspace/d1/d2") is True
    assert await sbx.files.make_dir("/workspace/d1/d2") is False
    await sbx.files.write("/workspace/d1/f.txt", "f")
    moved = await sbx.files.rename("/workspace/d1/f.txt", "/workspace/d3/g.txt")
    assert moved.path == "/workspace/d3/g.txt"
    assert await sbx.files.read("/workspace/d3/g.txt") == "f"
    await sbx.files.remove("/workspace/d1")
    await sbx.files.remove("/workspace/never-existed")
    assert not await sbx.files.exists("/workspace/d1")


async def test_missing_file_and_directory_read_raise_typed_errors(
    sbx: AsyncSandbox,
) -> None:
    with pytest.raises(FileNotFoundException):
        await sbx.files.read("/workspace/missing.txt")
    with pytest.raises(InvalidArgumentException):
        await sbx.files.read("/workspace")


async def test_watch_dir_reports_create_and_write(sbx: AsyncSandbox) -> None:
    await sbx.files.make_dir("/workspace/watched")
    events: list[tuple[str, FilesystemEventType]] = []
    handle = await sbx.files.watch_dir(
        "/workspace/watched", lambda e: events.append((e.name, e.type)), recursive=True
    )
    try:
        await sbx.files.write("/workspace/watched/new.txt", "1")
        await sbx.commands.run(
            "mkdir -p /workspace/watched/sub && echo 2 > /workspace/watched/sub/x"
        )
        # sub/x may be written before sub is watched: then it is announced
        # as created when the new directory's watch starts.
        await eventually(lambda: any(name == "sub/x" for name, _ in events))
        assert ("new.txt", FilesystemEventType.CREATE) in events
    finally:
        await handle.stop()


async def test_octet_stream_gzip_and_metadata_uploads(sbx: AsyncSandbox) -> None:
    payload = b"streamed\n" * 1000
    await sbx.files.write("/workspace/up/octet.bin", io.BytesIO(payload))
    assert await sbx.files.read("/workspace/up/octet.bin", format="bytes") == payload
    await sbx.files.write("/workspace/up/gz.txt", "zipped", gzip=True)
    assert await sbx.files.read("/workspace/up/gz.txt", gzip=True) == "zipped"
    await sbx.files.write("/workspace/up/meta.txt", "m", metadata={"owner": "agent"})
    info = await sbx.files.get_info("/workspace/up/meta.txt")
    assert info.metadata == {"owner": "agent"}


async def test_signed_urls_download_and_upload_without_the_header(
    sbx: AsyncSandbox,
) -> None:
    await sbx.files.write("/workspace/signed.txt", "signed")
    with urllib.request.urlopen(
        sbx.download_url("/workspace/signed.txt"), timeout=10
    ) as r:
        assert r.read() == b"signed"
    forged = sbx.download_url("/workspace/signed.txt").replace(
        "signature=v1_", "signature=v1_x"
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(forged, timeout=10)
    assert err.value.code == 401
    err.value.close()


async def test_watch_dir_include_entry_carries_entry_info(sbx: AsyncSandbox) -> None:
    await sbx.files.make_dir("/workspace/watched-entry")
    entries = []
    handle = await sbx.files.watch_dir(
        "/workspace/watched-entry", lambda e: entries.append(e), include_entry=True
    )
    try:
        await sbx.files.write("/workspace/watched-entry/e.txt", "12345")
        await eventually(lambda: any(e.entry is not None for e in entries))
        entry = next(e.entry for e in entries if e.entry is not None)
        assert entry.path == "/workspace/watched-entry/e.txt"
    finally:
        await handle.stop()


# --- commands ----------------------------------------------------------------


async def test_run_returns_stdout_stderr_and_exit_code(sbx: AsyncSandbox) -> None:
    result = await sbx.commands.run("echo out; echo err >&2")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 0)
    with pytest.raises(CommandExitException) as err:
        await sbx.commands.run("echo partial; exit 7")
    assert err.value.exit_code == 7
    assert err.value.stdout == "partial\n"


async def test_run_honours_envs_cwd_and_user(sbx: AsyncSandbox) -> None:
    result = await sbx.commands.run(
        'echo "$SBX_LEVEL $CALL_LEVEL $(pwd) $(whoami) $HOME"',
        envs={"CALL_LEVEL": "call"},
        cwd="/workspace",
        user="user",
    )
    assert result.stdout.split() == [
        "sandbox",
        "call",
        "/workspace",
        "user",
        "/home/user",
    ]
    with pytest.raises(InvalidArgumentException):
        await sbx.commands.run("true", cwd="/does/not/exist")


async def test_run_timeout_kills_the_command(sbx: AsyncSandbox) -> None:
    with pytest.raises(TimeoutException):
        await sbx.commands.run("sleep 30", timeout=1)


async def test_background_command_connect_and_kill(sbx: AsyncSandbox) -> None:
    handle = await sbx.commands.run(
        "for i in $(seq 1 600); do echo tick $i; sleep 0.05; done", background=True
    )
    listed = await sbx.commands.list()
    assert handle.pid in [p.pid for p in listed]
    seen: list[str] = []
    attached = await sbx.commands.connect(handle.pid, on_stdout=seen.append)
    await eventually(lambda: any("tick" in s for s in seen))
    assert await sbx.commands.kill(handle.pid) is True
    with pytest.raises(CommandExitException):
        await attached.wait()
    assert await sbx.commands.kill(handle.pid) is False


async def test_stdin_send_and_close(sbx: AsyncSandbox) -> None:
    handle = await sbx.commands.run("cat", background=True, stdin=True)
    await sbx.commands.send_stdin(handle.pid, "line one\n")
    await sbx.commands.close_stdin(handle.pid)
    result = await handle.wait()
    assert result.stdout == "line one\n"


async def test_stream_input_feeds_stdin_in_order(sbx: AsyncSandbox) -> None:
    if not hasattr(sbx.commands, "stream_input"):
        pytest.skip("this e2b release has no commands.stream_input")
    handle = await sbx.commands.run("cat", background=True, stdin=True)
    async with sbx.commands.stream_input(handle.pid) as stream:
        for i in range(5):
            await stream.send(f"part {i}\n")
    await sbx.commands.close_stdin(handle.pid)
    result = await handle.wait()
    assert result.stdout == "".join(f"part {i}\n" for i in range(5))


async def test_pty_create_send_resize_kill(sbx: AsyncSandbox) -> None:
    output = bytearray()
    pty = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=output.extend)
    await sbx.pty.resize(pty.pid, PtySize(rows=30, cols=100))
    await sbx.pty.send_stdin(pty.pid, b"stty size; echo pty-$((6*7))\n")
    await eventually(lambda: b"pty-42" in output and b"30 100" in output)
    assert await sbx.pty.kill(pty.pid) is True
    with pytest.raises(CommandExitException):
        await pty.wait()


# --- lifecycle ------------------------------------------------------------------


async def test_list_filters_by_state_and_metadata_and_pages() -> None:
    tag = secrets.token_hex(4)
    made = [
        await AsyncSandbox.create(timeout=60, metadata={"page": tag}) for _ in range(3)
    ]
    try:
        await made[0].pause()
        query = SandboxQuery(metadata={"page": tag}, state=[SandboxState.RUNNING])
        pager = AsyncSandbox.list(query=query, limit=1)
        seen = []
        while pager.has_next:
            seen += [s.sandbox_id for s in await pager.next_items()]
        assert sorted(seen) == sorted(s.sandbox_id for s in made[1:])
    finally:
        for sandbox in made:
            await sandbox.kill()


async def test_create_connect_pause_resume_list_kill() -> None:
    sandbox = await AsyncSandbox.create(timeout=120, metadata={"suite": "compat-async"})
    try:
        await sandbox.files.write("/home/user/keep.txt", "kept")
        await sandbox.pause()
        listed = await AsyncSandbox.list().next_items()
        states = {s.sandbox_id: s.state.value for s in listed}
        assert states[sandbox.sandbox_id] == "paused"
        again = await AsyncSandbox.connect(sandbox.sandbox_id)
        assert await again.files.read("/home/user/keep.txt") == "kept"
        info = await again.get_info()
        assert info.state.value == "running"
        assert info.metadata == {"suite": "compat-async"}
    finally:
        assert await sandbox.kill() is True
    assert await AsyncSandbox.kill(sandbox.sandbox_id) is False
    assert not await sandbox.is_running()
