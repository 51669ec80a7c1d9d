"""The per-sandbox supervisor: runs INSIDE the sandbox, as the sandbox user.

It is started by ``/usr/bin/python3 -I -S -c <this file's source>`` as the first
process of the sandbox's namespaces and talks to the host over a SOCK_SEQPACKET
socket (its fd number is in the config). Every process and file operation of the
sandbox goes through it, so the kernel resolves paths in the sandbox's own root
view with the sandbox's uid: a symlink planted in the sandbox can never make the
host open a host file. Opened files go to the host as descriptors (SCM_RIGHTS).

Standalone on purpose: it imports nothing but the standard library, because the
sandbox sees the system Python only.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import json
import os
import select
import signal
import socket
import stat
import sys
import termios
import time
from typing import Any

CHUNK = 60000
# In the jail there is no package: jail.py puts jailcalls.py's source above this.
with contextlib.suppress(ImportError):
    from services.sandboxhost.jailcalls import (
        become_root,
        load_filter,
        not_dumpable,
        read_sudo_request,
        sudo_listener,
    )

FILTER: bytes | None = None  # seccomp program every child loads before exec
GO_DIR = 1 << 31
GO_SYMLINK = 1 << 27


class OpError(Exception):
    """A failed operation, with its Connect error code."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


def os_error(exc: OSError, path: str) -> OpError:
    """Translate an OSError into a Connect-coded error."""
    codes = {
        errno.ENOENT: "not_found",
        errno.ENOTDIR: "invalid_argument",
        errno.EISDIR: "invalid_argument",
        errno.EEXIST: "already_exists",
        errno.EACCES: "permission_denied",
        errno.EPERM: "permission_denied",
        errno.EROFS: "permission_denied",
        errno.ENOSPC: "resource_exhausted",
        errno.ELOOP: "invalid_argument",
    }
    return OpError(codes.get(exc.errno or 0, "internal"), f"{path}: {exc.strerror}")


class Paths:
    """Sandbox path expansion (``~``, relative to home) and the optional root map."""

    def __init__(self, home: str, mapping: list[list[str]]) -> None:
        self.home = home
        # [sandbox prefix, real prefix]; only used when running unisolated.
        self.mapping = mapping

    def expand(self, path: str) -> str:
        """Absolute sandbox path of ``path``."""
        if path == "~" or path.startswith("~/"):
            path = self.home + path[1:]
        if not path.startswith("/"):
            path = os.path.join(self.home, path)
        return os.path.normpath(path)

    def real(self, path: str) -> str:
        """The path the kernel sees for a sandbox path."""
        for virt, real in self.mapping:
            if path == virt or path.startswith(virt + "/"):
                return real + path[len(virt) :]
        return path


def permissions(mode: int) -> str:
    """``ls``-style permission string, as Go's FileMode.String prints it."""
    kind = "d" if stat.S_ISDIR(mode) else "L" if stat.S_ISLNK(mode) else "-"
    bits = "rwxrwxrwx"
    return kind + "".join(
        b if mode & (1 << (8 - i)) else "-" for i, b in enumerate(bits)
    )


def owner_names(st: os.stat_result) -> tuple[str, str]:
    """User and group names of a stat result (numeric strings if unknown)."""
    try:
        import grp
        import pwd

        user = pwd.getpwuid(st.st_uid).pw_name
        group = grp.getgrgid(st.st_gid).gr_name
    except (KeyError, ImportError):
        return str(st.st_uid), str(st.st_gid)
    return user, group


def rfc3339(ns: int) -> str:
    """Timestamp in proto3 JSON form."""
    secs, frac = divmod(ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    return f"{base}.{frac:09d}Z" if frac else base + "Z"


def entry(real: str, shown: str) -> dict[str, Any]:
    """EntryInfo (proto3 JSON) of a path; symlinks report their target's type."""
    lst = os.lstat(real)
    info: dict[str, Any] = {"name": os.path.basename(shown) or "/", "path": shown}
    st = lst
    if stat.S_ISLNK(lst.st_mode):
        info["isSymlink"] = True
        info["symlinkTarget"] = link_target(real, shown)
        try:
            st = os.stat(real)
        except OSError:
            st = lst
    if stat.S_ISDIR(st.st_mode):
        info["type"] = "FILE_TYPE_DIRECTORY"
    elif stat.S_ISREG(st.st_mode):
        info["type"] = "FILE_TYPE_FILE"
    elif stat.S_ISLNK(st.st_mode):
        info["type"] = "FILE_TYPE_SYMLINK"
    info["size"] = str(st.st_size)
    info["mode"] = st.st_mode & 0o777  # Go's Perm(): no ModeDir bit, as envd sends
    info["permissions"] = permissions(st.st_mode)
    info["owner"], info["group"] = owner_names(st)
    info["modifiedTime"] = rfc3339(st.st_mtime_ns)
    meta = metadata(real) if stat.S_ISREG(st.st_mode) else {}
    if meta:
        info["metadata"] = meta
    return info


def link_target(real: str, shown: str) -> str:
    """A symlink's absolute resolved target, as the sandbox names it (EvalSymlinks)."""
    target = os.path.realpath(real)
    # Unisolated, a sandbox prefix maps onto a real one: map the answer back.
    same = 0
    while same < min(len(real), len(shown)) and real[-1 - same] == shown[-1 - same]:
        same += 1
    real_root, shown_root = real[: len(real) - same], shown[: len(shown) - same]
    if real_root != shown_root and target.startswith(real_root):
        return shown_root + target[len(real_root) :]
    return target


def metadata(real: str) -> dict[str, str]:
    """The ``user.e2b.*`` extended attributes of a file."""
    out: dict[str, str] = {}
    try:
        names = os.listxattr(real)
    except OSError:
        return out
    for name in names:
        if name.startswith("user.e2b."):
            try:
                out[name[9:]] = os.getxattr(real, name).decode("utf-8", "replace")
            except OSError:
                continue
    return out


class Supervisor:
    """Serve the host's requests and report the exits of spawned processes."""

    def __init__(self, sock: socket.socket, paths: Paths) -> None:
        self.sock = sock
        self.paths = paths
        self.children: set[int] = set()
        self.sudoers: dict[int, socket.socket] = {}  # sudo child → its caller

    # --- wire -------------------------------------------------------------
    def send(self, msg: dict[str, Any], fds: list[int] | None = None) -> None:
        """Send one message, split into packets; fds ride on the last one."""
        data = json.dumps(msg, separators=(",", ":")).encode()
        while len(data) > CHUNK:
            self.sock.sendall(b"+" + data[:CHUNK])
            data = data[CHUNK:]
        if fds:
            socket.send_fds(self.sock, [b"." + data], fds)
        else:
            self.sock.sendall(b"." + data)

    def serve(self) -> None:
        """Main loop: requests from the host, SIGCHLD wake-ups."""
        rpipe, wpipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wpipe)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        pending = b""
        sudo = sudo_listener()
        watched = [self.sock.fileno(), rpipe] + ([sudo.fileno()] if sudo else [])
        while True:
            ready, _, _ = select.select(watched, [], [])
            if sudo is not None and sudo.fileno() in ready:
                self.sudo(sudo)
            if rpipe in ready:
                while True:
                    try:
                        if not os.read(rpipe, 512):
                            break
                    except BlockingIOError:
                        break
                self.reap()
            if self.sock.fileno() in ready:
                data, fds, _, _ = socket.recv_fds(self.sock, CHUNK + 16, 8)
                if not data:
                    return
                pending += data[1:]
                if data[:1] == b"+":
                    continue
                msg, pending = json.loads(pending), b""
                self.dispatch(msg, fds)

    def dispatch(self, msg: dict[str, Any], fds: list[int]) -> None:
        """Run one request and answer it."""
        op = getattr(self, "op_" + str(msg.get("op")), None)
        out_fds: list[int] = []
        try:
            if op is None:
                raise OpError("unimplemented", f"unknown op {msg.get('op')!r}")
            reply = op(msg, fds, out_fds)
            reply.update(id=msg["id"], ok=True)
        except OpError as exc:
            reply = {"id": msg["id"], "ok": False, "code": exc.code, "msg": exc.message}
        finally:
            for fd in fds:
                os.close(fd)
        self.send(reply, out_fds)
        for fd in out_fds:
            os.close(fd)

    def reap(self) -> None:
        """Collect exited children and tell the host their wait status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.children:
                self.children.discard(pid)
                self.send({"exit": pid, "status": status})
            conn = self.sudoers.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"status": status}).encode())
                conn.close()

    def sudo(self, listener: socket.socket) -> None:
        """Run a ``sudo`` request as root in a child; its status goes back later."""
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        try:
            msg, fds = read_sudo_request(conn)
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"error": str(exc)}).encode())
            conn.close()
            return
        argv = [str(a) for a in msg["argv"]]
        env = {str(k): str(v) for k, v in (msg.get("env") or {}).items()}
        env.update(USER="root", LOGNAME="root", SUDO_USER=env.get("USER", "user"))
        spawn = {"cmd": argv[0], "args": argv[1:], "env": env, "root": True}
        cwd = str(msg.get("cwd") or "/")
        errr, errw = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            self.exec_child(spawn, fds, cwd if os.path.isdir(cwd) else "/", errw)
        os.close(errw)
        for fd in fds:
            os.close(fd)
        failure = os.read(errr, 4096)
        os.close(errr)
        if failure:
            os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"error": failure.decode()}).encode())
            conn.close()
            return
        self.sudoers[pid] = conn

    # --- processes --------------------------------------------------------
    def op_spawn(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """Fork and exec a command in its own session (process group)."""
        cwd = self.paths.real(self.paths.expand(msg.get("cwd") or self.paths.home))
        if not os.path.isdir(cwd):
            raise OpError("invalid_argument", f"cwd '{msg.get('cwd')}' does not exist")
        stdio = fds * 3 if msg.get("pty") else fds
        errr, errw = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            self.exec_child(msg, stdio, cwd, errw)
        os.close(errw)
        failure = os.read(errr, 4096)
        os.close(errr)
        if failure:
            os.waitpid(pid, 0)
            raise OpError("invalid_argument", failure.decode("utf-8", "replace"))
        self.children.add(pid)
        return {"pid": pid}

    @staticmethod
    def exec_child(msg: dict[str, Any], stdio: list[int], cwd: str, errw: int) -> None:
        """In the forked child: new session, stdio, controlling tty, exec."""
        try:
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            os.setsid()
            if len(stdio) == 2:  # stdin disabled
                stdio = [os.open("/dev/null", os.O_RDONLY), *stdio]
            for target, fd in enumerate(stdio):
                os.dup2(fd, target)
            if msg.get("pty"):
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            os.chdir(cwd)
            os.closerange(3, errw)
            os.closerange(errw + 1, 65536)
            if msg.get("root"):
                become_root()
            if FILTER is not None:
                load_filter(FILTER)
            argv = [msg["cmd"], *msg.get("args", [])]
            os.execvpe(argv[0], argv, msg["env"])  # noqa: S606 - envd runs argv
        except OSError as exc:
            os.write(errw, f"{msg['cmd']}: {exc.strerror}".encode())
        finally:
            os._exit(127)

    def op_signal(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """Signal a spawned process's whole process group."""
        pid, sig = int(msg["pid"]), int(msg["sig"])
        if pid not in self.children:
            raise OpError("not_found", f"process {pid} not found")
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            os.kill(pid, sig)
        return {}

    # --- files ------------------------------------------------------------
    def resolve(self, msg: dict[str, Any], key: str = "path") -> tuple[str, str]:
        """(sandbox path, real path) of a request's path."""
        raw = str(msg.get(key) or "")
        if not raw:
            raise OpError("invalid_argument", f"{key} is required")
        if "\x00" in raw:
            raise OpError("invalid_argument", f"{key} contains NUL")
        shown = self.paths.expand(raw)
        return shown, self.paths.real(shown)

    def op_open(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """Open a regular file for reading or (creating parents) for writing.

        O_NONBLOCK and the regular-file check keep FIFOs and devices out: the
        host reads and writes the descriptor on its event loop.
        """
        shown, real = self.resolve(msg)
        writing = msg.get("mode") == "w"
        try:
            if writing:
                os.makedirs(os.path.dirname(real), exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK
                fd = os.open(real, flags, 0o644)
            else:
                fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                os.close(fd)
                kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
                raise OpError("invalid_argument", f"path '{shown}' is {kind}")
            if writing:
                os.ftruncate(fd, 0)
        except OSError as exc:
            if exc.errno == errno.ENOENT and msg.get("mode") != "w":
                raise OpError("not_found", f"path '{shown}' does not exist") from exc
            if exc.errno == errno.EISDIR:
                raise OpError(
                    "invalid_argument", f"path '{shown}' is a directory"
                ) from exc
            raise os_error(exc, shown) from exc
        out.append(fd)
        return {"path": shown}

    def op_opendir(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """Open a directory (for watching) and hand its fd to the host."""
        shown, real = self.resolve(msg)
        try:
            fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise os_error(exc, shown) from exc
        out.append(fd)
        return {"path": shown}

    def op_stat(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """EntryInfo of one path."""
        shown, real = self.resolve(msg)
        try:
            return {"entry": entry(real, shown)}
        except OSError as exc:
            raise os_error(exc, shown) from exc

    def op_list(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """Entries of a directory, up to ``depth`` levels (symlinks not followed)."""
        shown, real = self.resolve(msg)
        depth = max(int(msg.get("depth") or 1), 1)
        try:
            if not stat.S_ISDIR(os.stat(real).st_mode):
                raise OpError("invalid_argument", f"path '{shown}' is not a directory")
        except OSError as exc:
            raise os_error(exc, shown) from exc
        entries: list[dict[str, Any]] = []
        self.walk(real, shown, depth, entries)
        return {"entries": entries}

    def walk(
        self, real: str, shown: str, depth: int, out: list[dict[str, Any]]
    ) -> None:
        """Append entries of ``real`` and, while depth lasts, of its subdirectories."""
        try:
            names = sorted(os.listdir(real))
        except OSError:
            return
        for name in names:
            sub_real, sub_shown = os.path.join(real, name), os.path.join(shown, name)
            try:
                info = entry(sub_real, sub_shown)
            except OSError:
                continue  # vanished meanwhile
            out.append(info)
            is_dir = info.get("type") == "FILE_TYPE_DIRECTORY"
            if depth > 1 and is_dir and not info.get("isSymlink"):
                self.walk(sub_real, sub_shown, depth - 1, out)

    def op_mkdir(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """Create a directory and its parents."""
        shown, real = self.resolve(msg)
        if os.path.lexists(real):
            if os.path.isdir(real):
                raise OpError("already_exists", f"directory '{shown}' already exists")
            raise OpError("invalid_argument", f"path '{shown}' exists and is not a dir")
        try:
            os.makedirs(real, 0o755)
            return {"entry": entry(real, shown)}
        except OSError as exc:
            raise os_error(exc, shown) from exc

    def op_move(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """Rename a path, creating the destination's parents."""
        src_shown, src = self.resolve(msg, "source")
        dst_shown, dst = self.resolve(msg, "destination")
        try:
            os.lstat(src)
        except OSError as exc:
            raise os_error(exc, src_shown) from exc
        try:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.rename(src, dst)
            return {"entry": entry(dst, dst_shown)}
        except OSError as exc:
            raise os_error(exc, dst_shown) from exc

    def op_remove(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """``rm -rf``: a missing path is not an error."""
        shown, real = self.resolve(msg)
        try:
            if os.path.isdir(real) and not os.path.islink(real):
                remove_tree(real)
            else:
                os.unlink(real)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise os_error(exc, shown) from exc
        return {}

    def op_dial(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """Connect to a port the sandbox serves on its loopback; hand back the fd.

        The host's proxy (``get_host``) uses it: the socket lives in the sandbox's
        network namespace, nothing else crosses it.
        """
        port = int(msg["port"])
        for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(2.0)
            try:
                sock.connect((addr, port))
            except OSError:
                sock.close()
                continue
            out.append(sock.detach())
            return {}
        raise OpError("unavailable", f"port {port} is not open in the sandbox")

    def op_ping(
        self, msg: dict[str, Any], fds: list[int], out: list[int]
    ) -> dict[str, Any]:
        """Liveness check; reports the supervisor's pid in the sandbox."""
        return {"pid": os.getpid()}


def remove_tree(path: str) -> None:
    """Remove a directory tree without following symlinks."""
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                os.unlink(full)
            else:
                os.rmdir(full)
    os.rmdir(path)


def apply_rlimits(limits: dict[str, int]) -> None:
    """Fallback limits when no cgroup can be made (inherited by every child)."""
    import resource

    names = {"as": resource.RLIMIT_AS, "nproc": resource.RLIMIT_NPROC}
    for name, value in limits.items():
        if name in names:
            resource.setrlimit(names[name], (value, value))


def main() -> None:
    """Entry point: config JSON in argv[1] (home, link fd, path mapping)."""
    global FILTER
    config = json.loads(sys.argv[1])
    not_dumpable()
    if config.get("seccomp"):
        FILTER = base64.b64decode(config["seccomp"])
    os.umask(0o022)
    apply_rlimits(config.get("rlimits") or {})
    sock = socket.socket(fileno=int(config["fd"]))
    paths = Paths(config["home"], config.get("mapping", []))
    Supervisor(sock, paths).serve()


if __name__ == "__main__":
    main()
