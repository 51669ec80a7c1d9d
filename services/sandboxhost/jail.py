"""Start a sandbox's supervisor inside bubblewrap (or, without it, unisolated).

One long-lived ``bwrap`` per sandbox: own user, mount, pid, ipc and uts
namespaces (and net with ``network=none``), system directories read-only, its
own ``/tmp``, ``/home/user`` and ``/workspace``, a scrubbed environment and an
unprivileged uid. The supervisor inside is the parent of every process the
sandbox runs, so all of them share the sandbox's namespaces and cgroups.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import msgspec

from services.common.children import signal_child
from services.sandboxhost import jailcalls, network, quota, seccomp, supervisor
from services.sandboxhost.cgroups import SandboxCgroups
from services.sandboxhost.errors import JailError
from services.sandboxhost.network import Egress, NetworkSpec

log = logging.getLogger(__name__)

SANDBOX_UID = 1000
HOME = "/home/user"
WORKSPACE = "/workspace"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Only these entries of the host's /etc enter a sandbox: enough for the dynamic
# linker, TLS, DNS, shells and Python; never /etc/environment or tool configs
# that may carry credentials.
ETC_ALLOWED = [
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "hosts",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "localtime",
    "timezone",
    "protocols",
    "services",
    "mime.types",
    "bash.bashrc",
    "profile",
    "profile.d",
    "inputrc",
    "terminfo",
    "os-release",
    "debian_version",
    "magic",
    "mime.types",
    "python3",
    "python3.11",
    "login.defs",
    "shells",
    "bash_completion",
    "bash_completion.d",
    "vim",
    "mailcap",
]
FUTURE = "from __future__ import annotations\n"
# One program for ``python3 -I -S -c``: the jail has no agentbus package.
SUPERVISOR_SOURCE = FUTURE + "\n".join(
    Path(str(module.__file__)).read_text().replace(FUTURE, "")
    for module in (jailcalls, supervisor)
)
SUDO_SHIM = (Path(__file__).parent / "sudo_shim.py").read_text()
HOST_LOCAL_BIN = "/run/host-local-bin"
# Never /opt (not on the allow-list; hosts keep vendor trees and caches there).
ROOT_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")


class JailSpec(msgspec.Struct, frozen=True, kw_only=True):
    """How to start sandboxes on this host."""

    isolation: str  # "bwrap" | "none"
    bwrap: str
    python: str
    uid: int | None  # host uid to drop to (None: keep ours)
    gid: int | None
    # Where empty ext4 images live (services/sandboxhost/quota.py); None: no quota.
    disk_templates: str | None = None


def sandbox_env(spec: JailSpec, fs_home: Path) -> dict[str, str]:
    """The base environment of every process in a sandbox (nothing from the host)."""
    home = HOME if spec.isolation == "bwrap" else str(fs_home)
    return {
        "PATH": PATH,
        "HOME": home,
        "USER": "user",
        "LOGNAME": "user",
        "LANG": "C.UTF-8",
        "SHELL": "/bin/bash",
    }


def prepare_fs(
    sandbox_dir: Path, spec: JailSpec, net: NetworkSpec, disk_mb: int = 0
) -> Path:
    """Create the sandbox's writable directories (on its own disk image when
    quotas are on); return its fs root."""
    fs = sandbox_dir / "fs"
    sandbox_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(sandbox_dir, 0o700)  # no other host user reaches its files
    if spec.disk_templates and disk_mb > 0:
        quota.mount(sandbox_dir, disk_mb, Path(spec.disk_templates))
    for sub in ("workspace", "home", "tmp"):
        (fs / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(fs / "tmp", 0o1777)  # noqa: S103 - the sandbox's own /tmp
    etc = sandbox_dir / "etc"
    etc.mkdir(mode=0o700, exist_ok=True)
    uid = inner_uid(spec)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\n"
        f"user:x:{uid}:{uid}::{HOME}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text(f"root:x:0:\nuser:x:{uid}:\nnogroup:x:65534:\n")
    # The namespace's only resolver is slirp4netns's (none without egress).
    (etc / "resolv.conf").write_text(network.RESOLV_CONF if net.egress else "")
    (etc / "sudo").write_text(SUDO_SHIM)
    os.chmod(etc / "sudo", 0o755)  # noqa: S103 - the sandbox's sudo, run by its user
    for name in ("passwd", "group", "resolv.conf"):  # read through the sandbox's mount
        os.chmod(etc / name, 0o644)  # no secret; under a 0700 dir
    if spec.uid is not None and spec.gid is not None:
        for sub in ("workspace", "home", "tmp"):
            _chown_tree(fs / sub, spec.uid, spec.gid)
    return fs


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    if root.stat().st_uid == uid:
        return
    for dirpath, dirnames, filenames in os.walk(root):
        os.chown(dirpath, uid, gid, follow_symlinks=False)
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


def bwrap_argv(
    spec: JailSpec,
    sandbox_dir: Path,
    info_fd: int,
    ro_binds: tuple[tuple[str, str], ...] = (),
) -> list[str]:
    """The bubblewrap command line of one sandbox, up to the inner command.

    As root, bubblewrap itself runs privileged (it must reach data dirs under
    0700 parents) and ``setpriv`` drops to the sandbox's host uid inside, so no
    process of the sandbox keeps a capability. Otherwise an unprivileged user
    namespace maps the caller's uid to the sandbox user. The network namespace
    is always new (services/sandboxhost/network.py adds egress to it);
    ``info_fd`` receives bwrap's JSON with the sandbox's pid.
    """
    argv = [spec.bwrap]
    if spec.uid is None:
        argv += ["--unshare-user", "--uid", str(inner_uid(spec))]
        argv += ["--gid", str(inner_uid(spec))]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--hostname", "sandbox", "--unshare-cgroup-try", "--unshare-net"]
    argv += ["--die-with-parent", "--new-session", "--info-fd", str(info_fd)]
    argv += _system_mounts(sandbox_dir / "etc") + _own_mounts(sandbox_dir / "fs")
    argv += _local_bin(sandbox_dir / "etc")
    for src, dst in ro_binds:  # e.g. the sandbox's template layer (templates.py)
        argv += ["--perms", "0755", "--dir", os.path.dirname(dst)]
        argv += ["--ro-bind", src, dst]
    argv += ["--chdir", HOME, "--"]
    if spec.uid is not None and spec.gid is not None:
        argv += ["setpriv", f"--reuid={spec.uid}", f"--regid={spec.gid}"]
        argv += ["--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"]
    return argv


def _system_mounts(etc: Path) -> list[str]:
    """Host system directories, read-only; an allow-listed /etc."""
    argv: list[str] = []
    for name in ROOT_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), f"/{name}"]
    argv += ["--perms", "0755", "--dir", "/etc"]
    for name in ETC_ALLOWED:
        if (Path("/etc") / name).exists():
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--ro-bind", str(etc / "passwd"), "/etc/passwd"]
    argv += ["--ro-bind", str(etc / "group"), "/etc/group"]
    argv += ["--ro-bind", str(etc / "resolv.conf"), "/etc/resolv.conf"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777", "--tmpfs", "/dev/shm"]  # noqa: S108 - POSIX sem/shm
    return argv


def _own_mounts(fs: Path) -> list[str]:
    """The sandbox's writable /tmp, home and workspace."""
    argv = ["--tmpfs", "/run", "--dir", "/var", "--perms", "0755", "--dir", "/home"]
    argv += ["--bind", str(fs / "tmp"), "/tmp"]  # noqa: S108
    argv += ["--bind", str(fs / "home"), HOME]
    argv += ["--bind", str(fs / "workspace"), WORKSPACE]
    argv += ["--symlink", "../tmp", "/var/tmp"]  # noqa: S108
    return argv


def _local_bin(etc: Path) -> list[str]:
    """/usr/local/bin: the host's entries (as symlinks) plus the sandbox's sudo.

    A tmpfs over it (the host's /usr is read-only) holds the ``sudo`` shim where
    a login shell's PATH finds it; the host's own entries stay reachable.
    """
    host = Path("/usr/local/bin")
    if not host.is_dir():
        return []
    argv = ["--ro-bind", str(host), HOST_LOCAL_BIN, "--tmpfs", str(host)]
    for entry in sorted(os.listdir(host)):
        if entry != "sudo":
            argv += ["--symlink", f"{HOST_LOCAL_BIN}/{entry}", f"{host}/{entry}"]
    argv += ["--ro-bind", str(etc / "sudo"), f"{host}/sudo", "--remount-ro", str(host)]
    return argv


def inner_uid(spec: JailSpec) -> int:
    """The sandbox user's uid as processes inside see it."""
    return spec.uid if spec.uid is not None else SANDBOX_UID


def bwrap_works(bwrap: str) -> bool:
    """True if bubblewrap can create an unprivileged sandbox here."""
    if not shutil.which(bwrap):
        return False
    probe = [bwrap, "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/"]
    probe += ["--proc", "/proc", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


class Jail:
    """A started sandbox: the bwrap process, the host's end of its link, egress."""

    def __init__(self, proc: asyncio.subprocess.Process, sock: socket.socket) -> None:
        self.proc = proc
        self.sock = sock
        self.egress: Egress | None = None
        self.pid: int | None = None  # the sandbox's first process, host pid

    @classmethod
    async def start(
        cls,
        spec: JailSpec,
        sandbox_dir: Path,
        net: NetworkSpec,
        cgroups: SandboxCgroups | None,
        rlimits: dict[str, int] | None = None,
        disk_mb: int = 0,
        ro_binds: tuple[tuple[str, str], ...] = (),
    ) -> Jail:
        """Start the supervisor in the sandbox's namespaces and cgroups."""
        try:
            fs = await asyncio.to_thread(prepare_fs, sandbox_dir, spec, net, disk_mb)
        except OSError as exc:
            raise JailError(sandbox_dir.name, f"cannot prepare files: {exc}") from exc
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        info_r, info_w = os.pipe2(os.O_CLOEXEC)
        fds = [theirs.fileno(), info_w]
        argv = _command(spec, sandbox_dir, fds, rlimits, ro_binds)
        cg_fds = cgroups.procs_files() if cgroups else []
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        log_fd = os.open(sandbox_dir / "supervisor.log", flags, 0o600)
        log_file = os.fdopen(log_fd, "ab")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env=sandbox_env(spec, fs / "home"),
                cwd=str(fs / "home"),
                pass_fds=fds,
                preexec_fn=_joiner(cg_fds),
            )
        except OSError as exc:
            ours.close()
            os.close(info_r)
            raise JailError(sandbox_dir.name, f"cannot start: {exc}") from exc
        finally:
            log_file.close()
            theirs.close()
            for fd in [*fds[1:], *cg_fds]:
                os.close(fd)
        jail = cls(proc, ours)
        try:
            if spec.isolation == "bwrap":
                async with asyncio.timeout(network.START_TIMEOUT):
                    jail.pid = await asyncio.to_thread(_read_child_pid, info_r)
        except (OSError, ValueError, TimeoutError) as exc:
            await jail.stop()
            raise JailError(sandbox_dir.name, f"no sandbox pid: {exc}") from exc
        finally:
            os.close(info_r)
        return jail

    async def connect_network(self, net: NetworkSpec) -> None:
        """Give the namespace its rules and egress (before any code runs in it).

        Called once the supervisor answered: bubblewrap has finished setting up
        the namespace's loopback by then (doing both at once races on netlink).
        """
        if self.pid is None:
            return  # no namespace of its own (isolation none)
        host_net = await asyncio.to_thread(network.shared)
        self.egress = await host_net.attach(self.pid, net)

    async def stop(self) -> None:
        """Kill the sandbox's process tree and wait for bubblewrap to exit."""
        signal_child(self.proc)
        await self.proc.wait()
        egress, self.egress = self.egress, None
        if egress is not None:
            await egress.stop()


def _read_child_pid(fd: int) -> int:
    """The sandbox's host pid from bwrap's ``--info-fd`` JSON."""
    data = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            raise OSError("bubblewrap exited before reporting the sandbox's pid")
        data += chunk
        try:
            info = json.loads(data)
        except ValueError:
            continue
        return int(info["child-pid"])


def _command(
    spec: JailSpec,
    sandbox_dir: Path,
    fds: list[int],
    rlimits: dict[str, int] | None,
    ro_binds: tuple[tuple[str, str], ...] = (),
) -> list[str]:
    """bwrap (when isolating) + the supervisor with its JSON config.

    ``fds``: the supervisor's link and bwrap's info fd. With bubblewrap, every
    process the supervisor starts loads the seccomp filter (jailcalls.py).
    """
    fs = sandbox_dir / "fs"
    config: dict[str, object] = {"home": HOME, "fd": fds[0]}
    if rlimits:
        config["rlimits"] = rlimits
    if spec.isolation == "bwrap":
        outer = bwrap_argv(spec, sandbox_dir, fds[1], ro_binds)
        bpf = seccomp.program()
        if bpf is not None:
            config["seccomp"] = base64.b64encode(bpf).decode()
    else:
        outer = []
        config["mapping"] = [
            [HOME, str(fs / "home")],
            [WORKSPACE, str(fs / "workspace")],
        ]
    return [
        *outer,
        spec.python,
        "-I",
        "-S",
        "-c",
        SUPERVISOR_SOURCE,
        json.dumps(config),
    ]


def _joiner(cg_fds: list[int]) -> Callable[[], None]:
    """preexec_fn: join the sandbox's cgroups before anything else runs."""

    def join() -> None:
        for fd in cg_fds:
            os.write(fd, b"0")

    return join
