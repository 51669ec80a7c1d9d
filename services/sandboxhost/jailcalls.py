"""Kernel calls of the in-jail supervisor: seccomp, root in a user namespace, sudo.

Standard library only: jail.py prepends this file to the supervisor's source
(the jail has no agentbus package), so both run as one ``python3 -I -S -c``.

* Every process the supervisor starts loads the seccomp filter
  (services/sandboxhost/seccomp.py) just before ``exec``; the supervisor itself
  stays unfiltered so that it can still make the one namespace a root command
  needs.
* ``root`` (``user="root"``, ``sudo``): the child first enters a new user
  namespace in which uid/gid 0 is the sandbox user itself. It is root there —
  ``id -u`` is 0, it may chown/chmod the sandbox's own files — and nothing on the
  host: the sandbox's mount and network namespaces belong to the host's user
  namespace, so it cannot mount, change routes or rules, and host files are
  "other" to it. The filter loaded afterwards forbids further namespaces.
* ``sudo`` inside the sandbox is a small script (sudo_shim.py) that asks the
  supervisor over an abstract unix socket (private to the sandbox's network
  namespace) to run its command as root with the caller's stdio; passwordless,
  as in E2B sandboxes.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
from typing import Any

SUDO_SOCKET = "\0agentbus-sudo"
CLONE_NEWUSER = 0x10000000
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
MAX_SUDO_REQUEST = 256 * 1024


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def not_dumpable() -> None:
    """No core dumps, no ``/proc/<pid>/mem`` or ptrace by the sandbox's own uid.

    Only this process: its children exec, which makes them dumpable again.
    """
    _check(_libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def load_filter(bpf: bytes) -> None:
    """Install a compiled seccomp program on this process (and its future children)."""
    libc = _libc()
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = _Fprog(len(bpf) // 8, ctypes.addressof(buf))
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    _check(
        libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )


def become_root() -> None:
    """Enter a new user namespace where this process's uid and gid are 0."""
    uid, gid = os.getuid(), os.getgid()
    libc = _libc()
    # Forked from the non-dumpable supervisor: /proc/self would be root's and
    # its maps unwritable. This process is about to exec anyway.
    _check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
    _check(libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"0 {uid} 1"),
        ("gid_map", f"0 {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def sudo_listener() -> socket.socket | None:
    """The sandbox-wide sudo socket (None if it cannot be made)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(SUDO_SOCKET)
        sock.listen(16)
    except OSError:
        sock.close()
        return None
    sock.setblocking(False)
    return sock


def read_sudo_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request: JSON (argv, cwd, env) with the caller's stdio descriptors."""
    conn.settimeout(2.0)  # a silent client cannot stall the supervisor long
    data, fds, _, _ = socket.recv_fds(conn, MAX_SUDO_REQUEST, 3)
    try:
        msg = json.loads(data)
        if not isinstance(msg, dict) or len(fds) != 3 or not msg.get("argv"):
            raise ValueError("expected argv and three descriptors")
    except ValueError:
        for fd in fds:
            os.close(fd)
        raise
    return msg, fds
