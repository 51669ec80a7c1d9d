"""After a restart the host listens first and restores its sandboxes behind it.

``AGENTBUS_SANDBOXHOST_RESTORE_HOLD`` keeps every restore boot waiting until
the test lets it go (``release_restore``), so "still restoring" is a state the
test controls, not a race it hopes to win.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import urllib.error
import urllib.request
from typing import Any

from e2b import AsyncSandbox

from tests.plugins.sandboxhost import SandboxHostProcess
from tests.support.eventually import eventually
from tests.support.sandboxhost import control, opts

HOLD = {"AGENTBUS_SANDBOXHOST_RESTORE_HOLD": "true"}


def held_host(factory: Any, **extra: str) -> SandboxHostProcess:
    host: SandboxHostProcess = factory(env={**os.environ, **HOLD, **extra})
    return host


def restoring(host: SandboxHostProcess) -> list[str]:
    ids: list[str] = host.info()["restoring"]
    return ids


def envd_health(host: SandboxHostProcess, sid: str, token: str) -> tuple[int, Any]:
    """envd's ``/health`` for one sandbox: (status, JSON body or None)."""
    req = urllib.request.Request(
        host.url + "/health",
        headers={"E2b-Sandbox-Id": sid, "X-Access-Token": token},
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, None
    except urllib.error.HTTPError as exc:
        with exc:
            raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


def proxied(host: SandboxHostProcess, name: str) -> tuple[int, Any]:
    """A request for a sandbox's port (``Host: <port>-<id>.<domain>``)."""
    conn = http.client.HTTPConnection("127.0.0.1", host.port, timeout=20)
    try:
        conn.request("GET", "/", headers={"Host": name})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


async def _crash_with_one_running(host: SandboxHostProcess) -> AsyncSandbox:
    sbx = await AsyncSandbox.create(timeout=300, **opts(host))
    await sbx.files.write("/workspace/kept.txt", "kept")
    host.kill()
    host.start()  # returns once /health answers: the restore is still held
    return sbx


async def test_the_port_answers_while_restoring_and_a_request_waits_for_the_boot(
    sandboxhost_factory,  # type: ignore[no-untyped-def]
) -> None:
    host = held_host(sandboxhost_factory)
    sbx = await _crash_with_one_running(host)
    assert restoring(host) == [sbx.sandbox_id]
    assert control(host, "GET", "/sandboxes/nosuchsandbox")[0] == 404
    waiting = asyncio.ensure_future(
        asyncio.to_thread(control, host, "GET", f"/sandboxes/{sbx.sandbox_id}")
    )
    assert restoring(host) == [sbx.sandbox_id]
    assert not waiting.done()  # its boot cannot have begun: the hold is on
    host.set_faults(release_restore=True)
    status, detail = await asyncio.wait_for(waiting, 20)
    assert (status, detail["state"]) == (200, "running")
    assert "processesLostAt" in detail
    assert restoring(host) == []
    again = await AsyncSandbox.connect(sbx.sandbox_id, **opts(host))
    assert await again.files.read("/workspace/kept.txt") == "kept"
    assert await again.commands.list() == []
    assert (await again.commands.run("echo alive")).stdout == "alive\n"
    await again.kill()


async def test_a_request_for_a_restoring_sandbox_gets_503_after_the_bounded_wait(
    sandboxhost_factory,  # type: ignore[no-untyped-def]
) -> None:
    wait = {"AGENTBUS_SANDBOXHOST_RESTORE_WAIT_S": "0.2"}
    host = held_host(sandboxhost_factory, **wait)
    sbx = await _crash_with_one_running(host)
    token = sbx._envd_access_token or ""
    status, body = control(host, "GET", f"/sandboxes/{sbx.sandbox_id}")
    assert status == 503
    assert sbx.sandbox_id in body["message"]
    assert "restoring" in body["message"]
    status, body = envd_health(host, sbx.sandbox_id, token)
    assert status == 503
    assert "restoring" in body["message"]
    # Not its sandbox: refused at once (401), the restore is not revealed.
    assert envd_health(host, sbx.sandbox_id, "wrong-token")[0] == 401
    status, body = proxied(host, sbx.get_host(8000))
    assert status == 503
    assert body["sandboxId"] == sbx.sandbox_id
    assert proxied(host, "8000-nosuchsandbox.e2b.app")[0] == 404
    host.set_faults(release_restore=True)
    await eventually(lambda: not restoring(host), what="restore over")
    assert envd_health(host, sbx.sandbox_id, token)[0] == 204
    status, body = proxied(host, sbx.get_host(8000))  # booted; nothing listens
    assert status == 502
    assert "port is not open" in body["message"]
    await AsyncSandbox.kill(sbx.sandbox_id, **opts(host))


async def test_killing_a_restoring_sandbox_is_clean(
    sandboxhost_factory,  # type: ignore[no-untyped-def]
) -> None:
    host = held_host(sandboxhost_factory)
    killed = await AsyncSandbox.create(timeout=300, **opts(host))
    kept = await AsyncSandbox.create(timeout=300, **opts(host))
    host.kill()
    host.start()
    assert sorted(restoring(host)) == sorted([killed.sandbox_id, kept.sandbox_id])
    assert control(host, "DELETE", f"/sandboxes/{killed.sandbox_id}")[0] == 204
    host.set_faults(release_restore=True)
    await eventually(lambda: not restoring(host), what="restore over")
    assert control(host, "GET", f"/sandboxes/{killed.sandbox_id}")[0] == 404
    assert not (host.data_dir / "sandboxes" / killed.sandbox_id).exists()
    assert host.info()["sandboxes"] == 1  # the killed one was not booted back
    again = await AsyncSandbox.connect(kept.sandbox_id, **opts(host))
    assert (await again.commands.run("echo alive")).stdout == "alive\n"
    await again.kill()


async def test_many_running_sandboxes_are_all_restored_a_few_at_a_time(
    sandboxhost_factory,  # type: ignore[no-untyped-def]
) -> None:
    env = {**os.environ, "AGENTBUS_SANDBOXHOST_RESTORE_CONCURRENCY": "2"}
    host: SandboxHostProcess = sandboxhost_factory(env=env)
    made = [await AsyncSandbox.create(timeout=300, **opts(host)) for _ in range(5)]
    host.kill()
    host.start()
    for sbx in made:  # each waits for its own boot, whatever the order
        again = await AsyncSandbox.connect(sbx.sandbox_id, **opts(host))
        assert (await again.commands.run("echo up")).stdout == "up\n"
        _, detail = control(host, "GET", f"/sandboxes/{sbx.sandbox_id}")
        assert detail["state"] == "running"
        assert "processesLostAt" in detail
        await again.kill()
    assert restoring(host) == []


async def test_a_sandbox_whose_boot_fails_ends_paused_and_others_restore(
    sandboxhost_factory,  # type: ignore[no-untyped-def]
) -> None:
    host = held_host(sandboxhost_factory)
    broken = await AsyncSandbox.create(timeout=300, **opts(host))
    fine = await AsyncSandbox.create(timeout=300, **opts(host))
    host.kill()
    # Its template layer is gone: its jail cannot start.
    record = host.data_dir / "sandboxes" / broken.sandbox_id / "record.json"
    data = json.loads(record.read_text())
    data["template_root"] = str(host.data_dir / "no-such-template-layer")
    record.write_text(json.dumps(data))
    host.start()
    host.set_faults(release_restore=True)
    _, detail = control(host, "GET", f"/sandboxes/{broken.sandbox_id}")
    assert (detail["state"], detail["pauseMode"]) == ("paused", "filesystem")
    _, detail = control(host, "GET", f"/sandboxes/{fine.sandbox_id}")
    assert detail["state"] == "running"
    for sbx in (broken, fine):
        await AsyncSandbox.kill(sbx.sandbox_id, **opts(host))
