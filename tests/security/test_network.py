"""Each sandbox has its own network namespace: no host loopback, no neighbours."""

from __future__ import annotations

import contextlib
import secrets
import socket
from collections.abc import Iterator

import pytest
from e2b import AsyncSandbox

from services.common.natsserver import NatsServerProcess, free_port
from services.sandboxhost.network import host_addresses
from tests.plugins.sandboxhost import SandboxHostProcess
from tests.security.conftest import isolated
from tests.support.eventually import eventually
from tests.support.sandboxhost import control, opts

# Prints "open", or the errno name of the failed connect (fast: rules reject).
PROBE = (
    "import errno, socket, sys\n"
    "fam = socket.AF_UNIX if sys.argv[1] == 'unix' else socket.AF_INET\n"
    "s = socket.socket(fam); s.settimeout(5)\n"
    "addr = '\\0' + sys.argv[2] if fam == socket.AF_UNIX "
    "else (sys.argv[1], int(sys.argv[2]))\n"
    "try:\n"
    "    s.connect(addr); print('open')\n"
    "except OSError as e:\n"
    "    print(errno.errorcode.get(e.errno, str(e)))\n"
)
SERVER = (
    "import socket, sys\n"
    "fam = socket.AF_UNIX if sys.argv[1] == 'unix' else socket.AF_INET\n"
    "s = socket.socket(fam)\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind('\\0' + sys.argv[2] if fam == socket.AF_UNIX "
    "else (sys.argv[1], int(sys.argv[2])))\n"
    "s.listen(16)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.close()\n"
)


async def probe(sbx: AsyncSandbox, host: str, port: int | str) -> str:
    """Connect from inside ``sbx``; "open" or the errno name."""
    await sbx.files.write("/tmp/probe.py", PROBE)
    got = await sbx.commands.run(f"python3 /tmp/probe.py {host} {port}", timeout=30)
    return got.stdout.strip()


async def serve(sbx: AsyncSandbox, host: str, port: int | str) -> None:
    """A listener inside ``sbx`` (background), ready when this returns."""
    await sbx.files.write("/tmp/server.py", SERVER)
    await sbx.commands.run(f"python3 /tmp/server.py {host} {port}", background=True)
    await eventually(lambda: _is_open(sbx, host, port), timeout=15)


async def _is_open(sbx: AsyncSandbox, host: str, port: int | str) -> bool:
    return await probe(sbx, host, port) == "open"


@contextlib.contextmanager
def host_listener(addr: str) -> Iterator[int]:
    """A TCP listener on the host (accepting nothing); yields its port."""
    with socket.socket() as s:
        s.bind((addr, 0))
        s.listen()
        yield s.getsockname()[1]


async def test_neighbours_tcp_and_abstract_sockets_are_unreachable(
    sandboxhost: SandboxHostProcess, victim: AsyncSandbox, attacker: AsyncSandbox
) -> None:
    isolated(sandboxhost)
    port = free_port()
    name = "agentbus-" + secrets.token_hex(4)
    await serve(victim, "127.0.0.1", port)
    await serve(victim, "unix", name)
    # Reachable from the victim itself, so the probe can see "open" …
    assert await probe(victim, "unix", name) == "open"
    # … but not from the other tenant's sandbox.
    assert await probe(attacker, "127.0.0.1", port) == "ECONNREFUSED"
    assert await probe(attacker, "unix", name) == "ECONNREFUSED"
    got = await attacker.commands.run("cat /proc/net/tcp /proc/net/unix")
    assert f":{port:04X}" not in got.stdout
    assert name not in got.stdout


async def test_host_loopback_services_are_unreachable(
    sandboxhost: SandboxHostProcess,
    attacker: AsyncSandbox,
    nats_server: NatsServerProcess,
) -> None:
    isolated(sandboxhost)
    with host_listener("127.0.0.1") as gateway_like:
        ports = [sandboxhost.port, nats_server.port, gateway_like]
        for port in ports:
            assert await probe(attacker, "127.0.0.1", port) == "ECONNREFUSED"
            for gateway in ("10.0.2.2", "10.0.2.3"):  # slirp's host aliases
                assert await probe(attacker, gateway, port) != "open"
        got = await attacker.commands.run("cat /proc/net/tcp")
        for port in ports:
            assert f":{port:04X} " not in got.stdout


async def test_squatting_the_hosts_port_takes_nothing_from_the_host(
    sandboxhost: SandboxHostProcess, attacker: AsyncSandbox
) -> None:
    isolated(sandboxhost)
    port = free_port()  # e.g. the gateway's port while it restarts
    await serve(attacker, "127.0.0.1", port)
    await serve(attacker, "0.0.0.0", sandboxhost.port)  # the attack
    with socket.socket() as mine:
        mine.bind(("127.0.0.1", port))  # the host can still take its port
        mine.listen()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            assert c.getpeername()[1] == port
    assert sandboxhost.info()["isolation"] == "bwrap"  # the real host answers


def _public_host_address() -> str | None:
    addrs = [a for a in host_addresses() if not a.startswith("127.")]
    return addrs[0] if addrs else None


async def test_egress_rules_default_allow_out_and_deny_out(
    sandboxhost: SandboxHostProcess, attacker: AsyncSandbox
) -> None:
    """The host's own (non-loopback) address stands in for an outside server."""
    isolated(sandboxhost)
    addr = _public_host_address()
    if addr is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    o = opts(sandboxhost)
    with host_listener(addr) as port:
        # Default "internet": the host's addresses and private ranges are refused.
        assert await probe(attacker, addr, port) == "ECONNREFUSED"
        cases = [
            ({"network": {"allowOut": [f"{addr}/32"]}}, "open"),
            (
                {"allow_internet_access": False, "network": {"allowOut": [addr]}},
                "open",
            ),
            (
                {"network": {"allowOut": [addr], "denyOut": ["0.0.0.0/0"]}},
                "open",
            ),
            ({"allow_internet_access": False}, "ENETUNREACH"),
        ]
        for extra, want in cases:
            sbx = await AsyncSandbox.create(timeout=60, **o, **_sdk(extra))
            try:
                assert await probe(sbx, addr, port) == want, extra
            finally:
                await sbx.kill()


def _sdk(extra: dict[str, object]) -> dict[str, object]:
    """Create-body fields as the e2b SDK's keyword arguments."""
    out: dict[str, object] = {}
    if "allow_internet_access" in extra:
        out["allow_internet_access"] = extra["allow_internet_access"]
    net = extra.get("network")
    if isinstance(net, dict):
        out["network"] = {
            "allow_out": net.get("allowOut", []),
            "deny_out": net.get("denyOut", []),
        }
    return out


async def test_internet_mode_has_a_route_and_the_user_mode_resolver(
    sandboxhost: SandboxHostProcess, attacker: AsyncSandbox
) -> None:
    isolated(sandboxhost)
    got = await attacker.commands.run("cat /etc/resolv.conf /proc/net/route")
    assert "nameserver 10.0.2.3" in got.stdout
    assert "tap0\t00000000" in got.stdout  # the default route


def test_bad_network_rules_are_refused_with_a_clear_error(
    sandboxhost: SandboxHostProcess,
) -> None:
    for body, word in (
        ({"network": {"allowOut": "1.2.3.4"}}, "allowOut"),
        ({"network": {"denyOut": ["not a host!"]}}, "denyOut"),
        ({"allow_internet_access": "yes"}, "allow_internet_access"),
    ):
        status, answer = control(
            sandboxhost, "POST", "/v2/sandboxes", {"templateID": "base", **body}
        )
        assert status == 400, answer
        assert word in answer["message"]
