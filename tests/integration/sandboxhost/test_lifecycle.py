"""Pause/resume freeze and thaw, kill ends the tree, timeouts, restarts, faults."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from pathlib import Path

import pytest
from e2b import AsyncSandbox
from e2b.exceptions import SandboxException

from tests.plugins.sandboxhost import SandboxHostProcess
from tests.support.eventually import eventually
from tests.support.sandboxhost import control, opts

COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.01; done"


def fs_path(host: SandboxHostProcess, sandbox_id: str, inside: str) -> Path:
    """Where a sandbox path lives on the host (read by the test, not the host)."""
    top, _, rest = inside.strip("/").partition("/")
    if top == "home":
        top, rest = "home", rest.partition("/")[2]
    return host.data_dir / "sandboxes" / sandbox_id / "fs" / top / rest


def host_pids_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(name))
    return found


def read_counter(path: Path) -> int:
    """The counter loop's last value (0 while being rewritten)."""
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


async def _check_freeze_and_thaw(host: SandboxHostProcess) -> None:
    sbx = await AsyncSandbox.create(timeout=120, **opts(host))
    try:
        handle = await sbx.commands.run(COUNTER, background=True, timeout=0)
        counter = fs_path(host, sbx.sandbox_id, "/tmp/counter")
        await eventually(lambda: read_counter(counter) > 5)
        await sbx.pause()
        frozen = read_counter(counter)
        await asyncio.sleep(0.5)  # observation window: nothing may advance
        assert read_counter(counter) == frozen
        resumed = await AsyncSandbox.connect(sbx.sandbox_id, **opts(host))
        await eventually(lambda: read_counter(counter) > frozen + 5)
        assert read_counter(counter) < frozen + 200  # continued, not restarted
        assert handle.pid in [p.pid for p in await resumed.commands.list()]
    finally:
        await sbx.kill()


async def test_pause_freezes_a_counter_loop_and_resume_continues_it(
    sandboxhost: SandboxHostProcess,
) -> None:
    await _check_freeze_and_thaw(sandboxhost)


async def test_without_cgroups_pause_and_kill_fall_back_to_signals(
    sandboxhost_factory,  # type: ignore[no-untyped-def]
) -> None:
    env = dict(os.environ, AGENTBUS_SANDBOXHOST_CGROUPS="off")
    host: SandboxHostProcess = sandboxhost_factory(env=env)
    assert host.info()["cgroups"] == "none"
    await _check_freeze_and_thaw(host)
    sbx = await AsyncSandbox.create(timeout=60, **opts(host))
    marker = f"{secrets.randbelow(10**6) + 10**6}.75"
    await sbx.commands.run(f"(setsid sleep {marker} &); sleep {marker} &", timeout=10)
    await eventually(lambda: len(host_pids_with(marker)) >= 2)
    await sbx.kill()
    await eventually(lambda: not host_pids_with(marker), timeout=5)


async def test_kill_ends_the_whole_process_tree(
    sandboxhost: SandboxHostProcess,
) -> None:
    sbx = await AsyncSandbox.create(timeout=120, **opts(sandboxhost))
    marker = f"{secrets.randbelow(10**6) + 10**6}.5"
    await sbx.commands.run(
        f"(setsid sleep {marker} &); nohup sleep {marker} >/dev/null 2>&1 &"
        f" bash -c 'sleep {marker}' &",
        timeout=10,
    )
    await eventually(lambda: len(host_pids_with(marker)) >= 3)
    await sbx.kill()
    await eventually(lambda: not host_pids_with(marker), timeout=5)


async def test_command_kill_ends_its_process_group(
    sandboxhost: SandboxHostProcess,
) -> None:
    sbx = await AsyncSandbox.create(timeout=120, **opts(sandboxhost))
    try:
        marker = f"{secrets.randbelow(10**6) + 10**6}.25"
        handle = await sbx.commands.run(
            f"sleep {marker} & sleep {marker}", background=True, timeout=0
        )
        await eventually(lambda: len(host_pids_with(marker)) >= 2)
        assert await sbx.commands.kill(handle.pid)
        await eventually(lambda: not host_pids_with(marker), timeout=5)
    finally:
        await sbx.kill()


async def test_timeout_kills_or_pauses_as_the_lifecycle_asks(
    sandboxhost: SandboxHostProcess,
) -> None:
    _, killed = control(
        sandboxhost, "POST", "/v2/sandboxes", {"templateID": "base", "timeout": 1}
    )
    _, paused = control(
        sandboxhost,
        "POST",
        "/v2/sandboxes",
        {"templateID": "base", "timeout": 1, "autoPause": True},
    )

    def state(sid: str) -> str:
        status, body = control(sandboxhost, "GET", f"/sandboxes/{sid}")
        return "gone" if status == 404 else str(body["state"])

    await eventually(lambda: state(killed["sandboxID"]) == "gone", timeout=5)
    await eventually(lambda: state(paused["sandboxID"]) == "paused", timeout=5)
    status, _ = control(
        sandboxhost,
        "POST",
        f"/v2/sandboxes/{paused['sandboxID']}/connect",
        {"timeout": 30},
    )
    assert status == 201
    assert state(paused["sandboxID"]) == "running"
    control(sandboxhost, "DELETE", f"/sandboxes/{paused['sandboxID']}")


async def test_restart_keeps_records_and_files_and_reports_processes_lost(
    sandboxhost_factory,  # type: ignore[no-untyped-def]
) -> None:
    host: SandboxHostProcess = sandboxhost_factory()
    sbx = await AsyncSandbox.create(timeout=300, metadata={"k": "v"}, **opts(host))
    await sbx.files.write("/workspace/kept.txt", "kept")
    await sbx.commands.run("sleep 1000", background=True, timeout=0)
    host.stop()
    host.start()
    again = await AsyncSandbox.connect(sbx.sandbox_id, **opts(host))
    assert await again.files.read("/workspace/kept.txt") == "kept"
    assert await again.commands.list() == []
    _, detail = control(host, "GET", f"/sandboxes/{sbx.sandbox_id}")
    assert detail["state"] == "running"
    assert detail["metadata"] == {"k": "v"}
    assert "processesLostAt" in detail
    assert (await again.commands.run("echo alive")).stdout == "alive\n"
    await again.kill()


async def test_a_crashed_host_takes_its_sandboxes_processes_along(
    sandboxhost_factory,  # type: ignore[no-untyped-def]
) -> None:
    host: SandboxHostProcess = sandboxhost_factory()
    running = await AsyncSandbox.create(timeout=300, **opts(host))
    paused = await AsyncSandbox.create(timeout=300, **opts(host))
    marker = f"{secrets.randbelow(10**6) + 10**6}.125"
    for sbx in (running, paused):
        await sbx.commands.run(f"(setsid sleep {marker} &)", timeout=10)
    await paused.files.write("/workspace/p.txt", "paused files stay")
    await paused.pause()
    await eventually(lambda: len(host_pids_with(marker)) >= 2)
    host.kill()
    await eventually(lambda: not host_pids_with(marker), timeout=10)
    host.start()
    _, detail = control(host, "GET", f"/sandboxes/{paused.sandbox_id}")
    assert (detail["state"], detail["pauseMode"]) == ("paused", "filesystem")
    again = await AsyncSandbox.connect(paused.sandbox_id, **opts(host))
    assert await again.files.read("/workspace/p.txt") == "paused files stay"
    assert (await again.commands.run("echo thawed")).stdout == "thawed\n"
    await again.kill()
    await AsyncSandbox.kill(running.sandbox_id, **opts(host))


async def test_fault_injection_fails_resumes_delays_and_swaps_content(
    sandboxhost_factory,  # type: ignore[no-untyped-def]
) -> None:
    host: SandboxHostProcess = sandboxhost_factory()
    a = await AsyncSandbox.create(timeout=120, **opts(host))
    b = await AsyncSandbox.create(timeout=120, **opts(host))
    await a.files.write("/home/user/.agentbus/identity", "nonce-a")
    await b.files.write("/home/user/.agentbus/identity", "nonce-b")
    # Identity mismatch: a's id (and a's token) serves b's content.
    host.set_faults(swap={a.sandbox_id: b.sandbox_id})
    assert await a.files.read("/home/user/.agentbus/identity") == "nonce-b"
    host.set_faults(swap={a.sandbox_id: ""})
    assert await a.files.read("/home/user/.agentbus/identity") == "nonce-a"
    # The next resume fails once, then works.
    await a.pause()
    host.set_faults(fail_resumes=1, resume_status=500)
    with pytest.raises(SandboxException):
        await AsyncSandbox.connect(a.sandbox_id, **opts(host))
    resumed = await AsyncSandbox.connect(a.sandbox_id, **opts(host))
    assert await resumed.files.read("/home/user/.agentbus/identity") == "nonce-a"
    # Delays are added to the named operation only.
    host.set_faults(delay_ms={"get": 300})
    started = time.monotonic()
    await resumed.get_info()
    assert time.monotonic() - started >= 0.3
    host.clear_faults()
    assert host.set_faults() == {
        "fail_resumes": 0,
        "resume_status": 500,
        "delay_ms": {},
        "swap": {},
    }
    await a.kill()
    await b.kill()


async def test_killing_a_sandbox_ends_open_process_streams_with_an_error(
    sandboxhost: SandboxHostProcess,
) -> None:
    sbx = await AsyncSandbox.create(timeout=60, **opts(sandboxhost))
    handle = await sbx.commands.run("sleep 600", background=True, timeout=0)
    await sbx.kill()
    async with asyncio.timeout(10):
        with pytest.raises(SandboxException):
            await handle.wait()


async def test_auto_resume_wakes_a_paused_sandbox_on_envd_traffic(
    sandboxhost: SandboxHostProcess,
) -> None:
    _, created = control(
        sandboxhost,
        "POST",
        "/v2/sandboxes",
        {"templateID": "base", "autoResume": {"enabled": True}},
    )
    auto = await AsyncSandbox.connect(created["sandboxID"], **opts(sandboxhost))
    plain = await AsyncSandbox.create(timeout=60, **opts(sandboxhost))
    try:
        await auto.files.write("/workspace/w.txt", "awake")
        await auto.pause()
        assert await auto.files.read("/workspace/w.txt") == "awake"
        assert (await auto.get_info()).state.value == "running"
        # Without autoResume, a paused sandbox's envd stays unavailable.
        await plain.pause()
        with pytest.raises(SandboxException):
            await plain.files.read("/workspace/w.txt")
    finally:
        await auto.kill()
        await plain.kill()


async def test_a_sandbox_that_kills_all_its_processes_gets_a_new_supervisor(
    sandboxhost: SandboxHostProcess,
) -> None:
    sbx = await AsyncSandbox.create(timeout=60, **opts(sandboxhost))
    try:
        await sbx.files.write("/workspace/survives.txt", "files stay")
        with pytest.raises(SandboxException):
            await sbx.commands.run("kill -9 -1", timeout=10)

        async def answers() -> bool:
            try:
                return (await sbx.commands.run("echo up")).stdout == "up\n"
            except SandboxException:
                return False

        # A new jail (network, quota disk, overlay) under a loaded 2-core CI box.
        await eventually(answers, timeout=40)
        assert await sbx.files.read("/workspace/survives.txt") == "files stay"
        _, detail = control(sandboxhost, "GET", f"/sandboxes/{sbx.sandbox_id}")
        assert "processesLostAt" in detail
    finally:
        await sbx.kill()
