"""A sandbox's network: its own namespace, user-mode egress and egress rules.

Every bubblewrap sandbox gets a fresh network namespace (its own loopback, its
own abstract unix sockets, its own ``/proc/net``), so it can reach neither the
host's loopback services nor another sandbox. Modes:

* ``none``: nothing but that loopback.
* ``internet``: ``slirp4netns`` (a user-mode TCP/IP stack in a host process)
  gives the namespace a ``tap0`` with a default route; ``--disable-host-loopback``
  stops it from turning 10.0.2.2 into the host's 127.0.0.1. An nftables
  ``output`` chain inside the namespace (the sandbox has no ``CAP_NET_ADMIN``
  there) then refuses the host's own addresses and private / link-local /
  special ranges, plus the E2B ``network.denyOut`` list; ``network.allowOut``
  entries win over both (E2B precedence).

Host names in the lists are resolved when the sandbox boots (E2B matches them
per connection; here they become the addresses they had then).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import ipaddress
import json
import logging
import os
import re
import shutil
import socket
import subprocess
from typing import Any

import msgspec

from services.common.children import signal_child

log = logging.getLogger(__name__)
MODES = ("internet", "none")
SLIRP_DNS = "10.0.2.3"
RESOLV_CONF = f"nameserver {SLIRP_DNS}\n"
# Never reachable in "internet" mode unless allowOut names them.
SPECIAL_V4 = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/3",
)
LABEL = re.compile(r"[a-zA-Z0-9_]([a-zA-Z0-9_-]{0,61}[a-zA-Z0-9])?")
START_TIMEOUT = 10.0
NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1)


class NetworkSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a sandbox may reach (from the create request and the host default)."""

    mode: str = "internet"
    allow_out: list[str] = msgspec.field(default_factory=list)
    deny_out: list[str] = msgspec.field(default_factory=list)

    @property
    def egress(self) -> bool:
        """Whether the namespace gets a route out at all."""
        return self.mode == "internet"


class NetworkError(ValueError):
    """A create request's network fields are malformed."""


def _entries(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise NetworkError(f"network.{field}: expected a list of strings")
    for entry in value:
        _check_entry(entry, field)
    return list(value)


def _check_entry(entry: str, field: str) -> None:
    try:
        ipaddress.ip_network(entry, strict=False)
        return
    except ValueError:
        pass
    # "*.example.com" (E2B allowOut): valid, but it cannot be resolved to
    # addresses here, so it adds nothing (fails closed).
    labels = entry.removeprefix("*.").removesuffix(".").split(".")
    if len(entry) > 253 or not all(LABEL.fullmatch(label) for label in labels):
        raise NetworkError(f"network.{field}: {entry!r} is not a CIDR, IP or host name")


def from_request(body: dict[str, Any], default_mode: str) -> NetworkSpec:
    """The network of a create request (E2B wire names), validated."""
    net = body.get("network")
    net = {} if net is None else net
    if not isinstance(net, dict):
        raise NetworkError("network: expected an object")
    allow = _entries(net.get("allowOut"), "allowOut")
    deny = _entries(net.get("denyOut"), "denyOut")
    internet = body.get("allow_internet_access", body.get("allowInternetAccess"))
    if internet is not None and not isinstance(internet, bool):
        raise NetworkError("allow_internet_access: expected true or false")
    mode = default_mode if default_mode in MODES else "internet"
    if internet is False:
        if not allow:
            return NetworkSpec(mode="none")
        deny = ["0.0.0.0/0", *deny]  # E2B: no internet, but allowOut still goes
        mode = "internet"
    return NetworkSpec(mode=mode, allow_out=allow, deny_out=deny)


def _resolve(entries: list[str]) -> list[str]:
    """IPv4 networks of the entries (host names resolved now; v6 ignored)."""
    out: list[str] = []
    for entry in entries:
        try:
            net = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            if entry.startswith("*."):
                log.warning("network rule %r: wildcards are not enforced", entry)
                continue
            try:
                infos = socket.getaddrinfo(entry, None, socket.AF_INET)
            except OSError as exc:
                log.warning("network rule %r does not resolve: %s", entry, exc)
                continue
            out.extend(sorted({str(info[4][0]) for info in infos}))
            continue
        if net.version == 4:
            out.append(str(net))
    return out


def host_addresses() -> list[str]:
    """The host's own IPv4 addresses (a sandbox must not reach its services)."""
    try:
        done = subprocess.run(
            ["ip", "-j", "-4", "addr"], capture_output=True, timeout=5, check=True
        )
        links = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    return [
        info["local"]
        for link in links
        for info in link.get("addr_info", [])
        if info.get("local")
    ]


def ruleset(spec: NetworkSpec, host_addrs: list[str]) -> str:
    """The nftables program loaded into the sandbox's namespace."""
    blocked = [*SPECIAL_V4, *host_addrs]
    lines = [
        "table inet agentbus {",
        " chain out {",
        "  type filter hook output priority 0; policy accept;",
        '  oif "lo" accept',
        f"  ip daddr {SLIRP_DNS} udp dport 53 accept",
        f"  ip daddr {SLIRP_DNS} tcp dport 53 accept",
    ]
    allow = _resolve(spec.allow_out)
    deny = _resolve(spec.deny_out)
    if allow:
        lines.append(f"  ip daddr {{ {', '.join(allow)} }} accept")
    for nets in (deny, blocked):
        if nets:
            lines.append(f"  ip daddr {{ {', '.join(nets)} }} reject")
    lines += ["  meta nfproto ipv6 reject", " }", "}", ""]
    return "\n".join(lines)


class Egress:
    """The slirp4netns process serving one sandbox's namespace."""

    def __init__(self, proc: asyncio.subprocess.Process, exit_fd: int) -> None:
        self.proc = proc
        self._exit_fd = exit_fd

    async def stop(self) -> None:
        """Close its exit fd (it ends itself), kill it if it lingers."""
        with contextlib.suppress(OSError):
            os.close(self._exit_fd)
        try:
            async with asyncio.timeout(2.0):
                await self.proc.wait()
        except TimeoutError:
            signal_child(self.proc)
            await self.proc.wait()


class Network:
    """Host-wide network support: tools found once, host addresses read once."""

    def __init__(self) -> None:
        self.slirp = shutil.which("slirp4netns")
        self.nft = shutil.which("nft")
        self.nsenter = shutil.which("nsenter")
        self.host_addrs = host_addresses()
        self.available = bool(self.slirp and self.nft and self.nsenter)
        if not self.available:
            log.critical(
                "slirp4netns, nft or nsenter missing: sandboxes get NO internet "
                "(network mode internet acts as none); run scripts/setup.sh as root"
            )

    def describe(self) -> str:
        """What ``internet`` means on this host."""
        return "slirp4netns+nftables" if self.available else "unavailable"

    async def attach(self, pid: int, spec: NetworkSpec) -> Egress | None:
        """Rules, then egress, for the namespace of ``pid`` (None: no egress)."""
        if not spec.egress or not self.available:
            return None
        owner = None if os.geteuid() == 0 else owner_userns(pid)
        try:
            rules = asyncio.create_task(self._load_rules(pid, spec, owner))
            try:
                egress = await self._start_slirp(pid, owner)
            except BaseException:
                rules.cancel()
                raise
            try:
                await rules
            except BaseException:
                await egress.stop()
                raise
        finally:
            if owner is not None:
                os.close(owner)
        return egress

    async def _load_rules(self, pid: int, spec: NetworkSpec, owner: int | None) -> None:
        assert self.nsenter is not None
        assert self.nft is not None
        program = await asyncio.to_thread(ruleset, spec, self.host_addrs)
        argv = [self.nsenter, f"--net=/proc/{pid}/ns/net"]
        if owner is not None:
            argv += [f"--user=/proc/self/fd/{owner}", "--preserve-credentials"]
        proc = await asyncio.create_subprocess_exec(
            *argv, self.nft, "-f", "-",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            pass_fds=() if owner is None else (owner,),
        )  # fmt: skip
        out, _ = await proc.communicate(program.encode())
        if proc.returncode != 0:
            raise OSError(f"nft rules for sandbox pid {pid} failed: {out.decode()}")

    async def _start_slirp(self, pid: int, owner: int | None) -> Egress:
        assert self.slirp is not None
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
        argv = [self.slirp, "--configure", "--mtu=65520", "--disable-host-loopback"]
        argv.append("--enable-seccomp")
        if owner is None:
            argv.append("--enable-sandbox")  # its own mount ns, caps dropped
        else:  # --enable-sandbox fails without root ("setegid(0)")
            argv.append(f"--userns-path=/proc/self/fd/{owner}")
        argv += ["-r", str(ready_w), "-e", str(exit_r), str(pid), "tap0"]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(ready_w, exit_r, *([] if owner is None else [owner])),
            )
        finally:
            os.close(ready_w)
            os.close(exit_r)
        egress = Egress(proc, exit_w)
        try:
            async with asyncio.timeout(START_TIMEOUT):
                ready = await asyncio.to_thread(os.read, ready_r, 1)
        except BaseException:
            await egress.stop()
            raise
        finally:
            os.close(ready_r)
        if ready != b"1":
            await egress.stop()
            raise OSError(f"slirp4netns did not configure sandbox pid {pid}")
        return egress


def owner_userns(pid: int) -> int:
    """An fd of the user namespace that owns ``pid``'s network namespace.

    Without root, bwrap nests a second user namespace for the sandbox's uid;
    only the outer one (bwrap's, ours) holds CAP_NET_ADMIN over the network.
    """
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        owner = fcntl.ioctl(fd, NS_GET_USERNS)
    finally:
        os.close(fd)
    os.set_inheritable(owner, False)
    return owner


@functools.cache
def shared() -> Network:
    """The host's one :class:`Network` (first call probes tools and addresses)."""
    return Network()
