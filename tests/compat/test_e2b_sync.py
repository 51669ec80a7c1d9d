"""The unmodified sync e2b SDK against the sandbox host (runs with 2.63 and 2.45)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from e2b import CommandExitException, FilesystemEventType, Sandbox
from e2b.exceptions import FileNotFoundException, TimeoutException
from e2b.sandbox.commands.command_handle import PtySize


@pytest.fixture(scope="module")
def sbx() -> Iterator[Sandbox]:
    """One sandbox for this module."""
    sandbox = Sandbox.create(timeout=300)
    yield sandbox
    sandbox.kill()


def test_sync_files_roundtrip(sbx: Sandbox) -> None:
    sbx.files.write("/workspace/s.txt", "sync")
    assert sbx.files.read("/workspace/s.txt") == "sync"
    assert [e.name for e in sbx.files.list("/workspace")] == ["s.txt"]
    assert sbx.files.exists("/workspace/s.txt")
    assert sbx.files.get_info("/workspace/s.txt").size == 4
    assert sbx.files.make_dir("/workspace/sd") is True
    assert sbx.files.rename("/workspace/s.txt", "/workspace/sd/t.txt").name == "t.txt"
    sbx.files.remove("/workspace/sd")
    with pytest.raises(FileNotFoundException):
        sbx.files.read("/workspace/sd/t.txt")


def test_sync_watch_dir_polls_events(sbx: Sandbox) -> None:
    sbx.files.make_dir("/workspace/w")
    handle = sbx.files.watch_dir("/workspace/w")
    try:
        sbx.files.write("/workspace/w/f.txt", "1")
        deadline = time.monotonic() + 10
        events: list[tuple[str, FilesystemEventType]] = []
        while ("f.txt", FilesystemEventType.CREATE) not in events:
            assert time.monotonic() < deadline, events
            events += [(e.name, e.type) for e in handle.get_new_events()]
    finally:
        handle.stop()


def test_sync_commands_run_background_stdin_and_timeout(sbx: Sandbox) -> None:
    assert sbx.commands.run("echo $((1+2))").stdout == "3\n"
    with pytest.raises(CommandExitException) as err:
        sbx.commands.run("exit 3")
    assert err.value.exit_code == 3
    handle = sbx.commands.run("read x; echo got $x", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "it\n")
    assert handle.wait().stdout == "got it\n"
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 30", timeout=1)


def test_sync_pty_roundtrip(sbx: Sandbox) -> None:
    pty = sbx.pty.create(PtySize(rows=20, cols=60))
    sbx.pty.send_stdin(pty.pid, b"echo sync-$((2+3)); exit\n")
    output = bytearray()
    result = pty.wait(on_pty=output.extend)
    assert b"sync-5" in output
    assert result.exit_code == 0


def test_sync_lifecycle_pause_connect_kill() -> None:
    sandbox = Sandbox.create(timeout=60)
    try:
        sandbox.pause()
        assert Sandbox.get_info(sandbox.sandbox_id).state.value == "paused"
        resumed = Sandbox.connect(sandbox.sandbox_id)
        assert resumed.commands.run("echo back").stdout == "back\n"
    finally:
        assert sandbox.kill() is True
