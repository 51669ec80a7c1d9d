"""Start a sandbox's supervisor inside bubblewrap (or, without it, unisolated).

One long-lived ``bwrap`` per sandbox: own user, mount, pid, ipc and uts
namespaces (and net with ``network=none``), system directories read-only, its
own ``/tmp``, ``/home/user`` and ``/workspace``, a scrubbed environment and an
unprivileged uid. The supervisor inside is the parent of every process the
sandbox runs, so all of them share the sandbox's namespaces and cgroups.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import msgspec

from services.sandboxhost import supervisor
from services.sandboxhost.cgroups import SandboxCgroups
from services.sandboxhost.errors import JailError

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
    "resolv.conf",
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
SUPERVISOR_SOURCE = Path(supervisor.__file__).read_text()
ROOT_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt")


class JailSpec(msgspec.Struct, frozen=True, kw_only=True):
    """How to start sandboxes on this host."""

    isolation: str  # "bwrap" | "none"
    bwrap: str
    python: str
    uid: int | None  # host uid to drop to (None: keep ours)
    gid: int | None


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


def prepare_fs(sandbox_dir: Path, spec: JailSpec) -> Path:
    """Create the sandbox's writable directories; return its fs root."""
    fs = sandbox_dir / "fs"
    for sub in ("workspace", "home", "tmp"):
        (fs / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(fs / "tmp", 0o1777)  # noqa: S103 - the sandbox's own /tmp
    etc = sandbox_dir / "etc"
    etc.mkdir(exist_ok=True)
    uid = inner_uid(spec)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\n"
        f"user:x:{uid}:{uid}::{HOME}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text(f"root:x:0:\nuser:x:{uid}:\nnogroup:x:65534:\n")
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
    network: str,
    ro_binds: tuple[tuple[str, str], ...] = (),
) -> list[str]:
    """The bubblewrap command line of one sandbox, up to the inner command.

    As root, bubblewrap itself runs privileged (it must reach data dirs under
    0700 parents) and ``setpriv`` drops to the sandbox's host uid inside, so no
    process of the sandbox keeps a capability. Otherwise an unprivileged user
    namespace maps the caller's uid to the sandbox user.
    """
    argv = [spec.bwrap]
    if spec.uid is None:
        argv += ["--unshare-user", "--uid", str(inner_uid(spec))]
        argv += ["--gid", str(inner_uid(spec))]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--hostname", "sandbox", "--unshare-cgroup-try"]
    if network == "none":
        argv.append("--unshare-net")
    argv += ["--die-with-parent", "--new-session"]
    argv += _system_mounts(sandbox_dir / "etc") + _own_mounts(sandbox_dir / "fs")
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
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm"]  # noqa: S108
    return argv


def _own_mounts(fs: Path) -> list[str]:
    """The sandbox's writable /tmp, home and workspace."""
    argv = ["--tmpfs", "/run", "--dir", "/var", "--perms", "0755", "--dir", "/home"]
    argv += ["--bind", str(fs / "tmp"), "/tmp"]  # noqa: S108
    argv += ["--bind", str(fs / "home"), HOME]
    argv += ["--bind", str(fs / "workspace"), WORKSPACE]
    argv += ["--symlink", "../tmp", "/var/tmp"]  # noqa: S108
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
    """A started sandbox: the bwrap process and the host's end of its link."""

    def __init__(self, proc: asyncio.subprocess.Process, sock: socket.socket) -> None:
        self.proc = proc
        self.sock = sock

    @classmethod
    async def start(
        cls,
        spec: JailSpec,
        sandbox_dir: Path,
        network: str,
        cgroups: SandboxCgroups | None,
        rlimits: dict[str, int] | None = None,
        ro_binds: tuple[tuple[str, str], ...] = (),
    ) -> Jail:
        """Start the supervisor in the sandbox's namespaces and cgroups."""
        fs = prepare_fs(sandbox_dir, spec)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = _command(spec, sandbox_dir, network, theirs.fileno(), rlimits, ro_binds)
        cg_fds = cgroups.procs_files() if cgroups else []
        log_file = open(sandbox_dir / "supervisor.log", "ab")  # noqa: SIM115, ASYNC230
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env=sandbox_env(spec, fs / "home"),
                cwd=str(fs / "home"),
                pass_fds=(theirs.fileno(),),
                preexec_fn=_joiner(cg_fds),
            )
        except OSError as exc:
            ours.close()
            raise JailError(sandbox_dir.name, f"cannot start: {exc}") from exc
        finally:
            log_file.close()
            theirs.close()
            for fd in cg_fds:
                os.close(fd)
        return cls(proc, ours)

    async def stop(self) -> None:
        """Kill the sandbox's process tree and wait for bubblewrap to exit."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        await self.proc.wait()


def _command(
    spec: JailSpec,
    sandbox_dir: Path,
    network: str,
    link_fd: int,
    rlimits: dict[str, int] | None,
    ro_binds: tuple[tuple[str, str], ...] = (),
) -> list[str]:
    """bwrap (when isolating) + the supervisor with its JSON config."""
    fs = sandbox_dir / "fs"
    config: dict[str, object] = {"home": HOME, "fd": link_fd}
    if rlimits:
        config["rlimits"] = rlimits
    if spec.isolation == "bwrap":
        outer = bwrap_argv(spec, sandbox_dir, network, ro_binds)
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
