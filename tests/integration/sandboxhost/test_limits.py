"""Resource limits, network modes and the unisolated fallback."""

from __future__ import annotations

import errno
import os

from e2b import AsyncSandbox

from tests.plugins.sandboxhost import SandboxHostProcess
from tests.support.sandboxhost import control, opts

FORKS = """
import os, signal, time
pids = []
try:
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        pids.append(pid)
except OSError:
    pass
for pid in pids:
    os.kill(pid, signal.SIGKILL)
print(len(pids))
"""
BURN = """
import os, resource, time
pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(usage.ru_utime + usage.ru_stime)
"""
CONNECT = (
    'python3 -c "import socket,sys; s=socket.socket();'
    ' s.settimeout(2); print(s.connect_ex((sys.argv[1], int(sys.argv[2]))))"'
    " {addr} {port}"
)


async def test_memory_and_pid_limits_stop_runaway_code(sandboxhost_factory) -> None:  # type: ignore[no-untyped-def]
    env = dict(
        os.environ,
        AGENTBUS_SANDBOXHOST_MEMORY_MB="96",
        AGENTBUS_SANDBOXHOST_PIDS="40",
    )
    host: SandboxHostProcess = sandboxhost_factory(env=env)
    sbx = await AsyncSandbox.create(timeout=60, **opts(host))
    try:
        hog = await sbx.commands.run(
            "python3 -c 'x = bytearray(400 * 1024 * 1024); print(len(x))'; echo rc=$?",
            timeout=30,
        )
        assert "rc=137" in hog.stdout or "MemoryError" in hog.stderr
        await sbx.files.write("/tmp/forks.py", FORKS)
        forks = await sbx.commands.run("python3 /tmp/forks.py", timeout=30)
        assert int(forks.stdout) < 40
    finally:
        await sbx.kill()


async def test_cpu_quota_caps_the_whole_sandbox(sandboxhost_factory) -> None:  # type: ignore[no-untyped-def]
    env = dict(os.environ, AGENTBUS_SANDBOXHOST_CPU="0.25")
    host: SandboxHostProcess = sandboxhost_factory(env=env)
    sbx = await AsyncSandbox.create(timeout=60, **opts(host))
    try:
        await sbx.files.write("/tmp/burn.py", BURN)
        burned = await sbx.commands.run("python3 /tmp/burn.py", timeout=30)
        # Two busy processes for 1 s of wall time get a quarter of one CPU.
        assert float(burned.stdout) < 0.6
    finally:
        await sbx.kill()


async def test_no_sandbox_reaches_the_host_and_none_has_no_route_at_all(
    sandboxhost: SandboxHostProcess,
) -> None:
    port = sandboxhost.port
    online = await AsyncSandbox.create(timeout=60, **opts(sandboxhost))
    offline = await AsyncSandbox.create(
        timeout=60, allow_internet_access=False, **opts(sandboxhost)
    )
    try:
        for sbx in (online, offline):  # its own loopback: nobody listens there
            got = await sbx.commands.run(CONNECT.format(addr="127.0.0.1", port=port))
            assert got.stdout.strip() == str(errno.ECONNREFUSED)
        # Outside its loopback: "internet" has a route (refused by the rules),
        # "none" has none.
        reach = await online.commands.run(CONNECT.format(addr="10.0.2.2", port=port))
        assert reach.stdout.strip() == str(errno.ECONNREFUSED)
        cut = await offline.commands.run(CONNECT.format(addr="10.0.2.2", port=port))
        assert cut.stdout.strip() == str(errno.ENETUNREACH)
    finally:
        await online.kill()
        await offline.kill()


async def test_without_bubblewrap_the_host_says_so_and_still_works(
    sandboxhost_factory,  # type: ignore[no-untyped-def]
) -> None:
    env = dict(os.environ, AGENTBUS_SANDBOXHOST_BWRAP="/nonexistent/bwrap")
    host: SandboxHostProcess = sandboxhost_factory(env=env)
    assert host.info()["isolation"] == "none"
    assert "NOT ISOLATED" in host.log_path.read_text()
    sbx = await AsyncSandbox.create(timeout=60, **opts(host))
    try:
        await sbx.files.write("/workspace/x.txt", "unisolated")
        result = await sbx.commands.run(
            "cat ~/../workspace/x.txt; echo; cat /workspace/x.txt || true"
        )
        assert result.stdout.startswith("unisolated")
        _, detail = control(host, "GET", f"/sandboxes/{sbx.sandbox_id}")
        assert detail["isolation"] == "none"
    finally:
        await sbx.kill()
