"""A sandbox's port is reached only through the host's proxy (E2B ``get_host``)."""

from __future__ import annotations

import http.client
import socket

from e2b import AsyncSandbox

from services.common.natsserver import free_port
from tests.plugins.sandboxhost import SandboxHostProcess
from tests.security.conftest import isolated
from tests.support.eventually import eventually
from tests.support.sandboxhost import opts

ECHO = (
    "import http.server\n"
    "class H(http.server.SimpleHTTPRequestHandler):\n"
    "    def do_POST(self):\n"
    "        n = int(self.headers['Content-Length'])\n"
    "        body = self.rfile.read(n)[::-1]\n"
    "        self.send_response(201); self.send_header('X-Echo', 'yes')\n"
    "        self.send_header('Content-Length', str(len(body))); self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "http.server.ThreadingHTTPServer(('127.0.0.1', PORT), H).serve_forever()\n"
)


def fetch(
    host: SandboxHostProcess,
    name: str,
    method: str = "GET",
    path: str = "/",
    body: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """A request to the host's listener with ``Host: name``."""
    conn = http.client.HTTPConnection("127.0.0.1", host.port, timeout=15)
    try:
        conn.request(method, path, body=body, headers={"Host": name})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


async def test_get_host_reaches_a_server_in_the_sandbox_and_nothing_else(
    sandboxhost: SandboxHostProcess, victim: AsyncSandbox, attacker: AsyncSandbox
) -> None:
    isolated(sandboxhost)
    port = free_port()
    await victim.files.write("/workspace/www/hello.txt", "hello from inside\n")
    await victim.files.write("/tmp/echo.py", ECHO.replace("PORT", str(port)))
    await victim.commands.run(
        "cd /workspace/www && python3 /tmp/echo.py", background=True
    )
    name = victim.get_host(port)
    assert name.startswith(f"{port}-{victim.sandbox_id}.")
    await eventually(lambda: fetch(sandboxhost, name, path="/hello.txt")[0] == 200, 15)
    status, _, data = fetch(sandboxhost, name, path="/hello.txt")
    assert (status, data) == (200, b"hello from inside\n")
    status, headers, data = fetch(sandboxhost, name, "POST", "/x", b"abc" * 50_000)
    assert (status, headers.get("X-Echo"), data) == (201, "yes", b"cba" * 50_000)
    assert fetch(sandboxhost, name, path="/missing")[0] == 404  # the server's own
    # The port lives in the sandbox's namespace only: not on the host …
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    # … not through another sandbox's name, and a closed port is a clear 502.
    assert fetch(sandboxhost, attacker.get_host(port))[0] == 502
    status, _, data = fetch(
        sandboxhost, victim.get_host(port + 1 if port < 65535 else 1)
    )
    assert status == 502
    assert b"port is not open" in data
    assert fetch(sandboxhost, f"{port}-nosuchsandbox0000000.e2b.app")[0] == 404
    # Without a sandbox Host the listener is still the control plane / envd.
    assert fetch(sandboxhost, f"127.0.0.1:{sandboxhost.port}", path="/health")[0] == 204


async def test_http_to_a_paused_auto_resume_sandbox_wakes_it(
    sandboxhost: SandboxHostProcess,
) -> None:
    isolated(sandboxhost)
    sbx = await AsyncSandbox.create(
        timeout=60,
        lifecycle={"on_timeout": "pause", "auto_resume": True},
        **opts(sandboxhost),
    )
    try:
        port = free_port()
        await sbx.files.write("/workspace/www/up.txt", "awake\n")
        await sbx.files.write("/tmp/echo.py", ECHO.replace("PORT", str(port)))
        await sbx.commands.run(
            "cd /workspace/www && python3 /tmp/echo.py", background=True
        )
        name = sbx.get_host(port)
        await eventually(lambda: fetch(sandboxhost, name, path="/up.txt")[0] == 200, 15)
        await sbx.pause()
        assert not await sbx.is_running()
        status, _, data = fetch(sandboxhost, name, path="/up.txt")
        assert (status, data) == (200, b"awake\n")
        assert await sbx.is_running()
    finally:
        await sbx.kill()
