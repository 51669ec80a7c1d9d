"""The seccomp filter of every sandbox process (compiled once, loaded by bwrap).

Sandbox code needs none of these, and each is a way out of (or around) the
jail: new namespaces (``unshare``, ``setns``, ``clone`` with ``CLONE_NEW*``),
mounts, eBPF, perf, the kernel keyring, tracing other processes (the in-jail
supervisor included), kernel modules and the like. Each answers ``EPERM``;
``clone3`` answers ``ENOSYS`` (its flags sit in memory a filter cannot read, so
libc falls back to ``clone``, whose flags it can). Syscalls of a foreign
architecture (e.g. i386 ``int 0x80`` on x86-64) kill the process.

The filter is built with libseccomp (PyPI ``pyseccomp``) once per host and
passed as a compiled BPF program to the in-jail supervisor, which loads it (with
``no_new_privs``) in every process it starts, just before ``exec``
(services/sandboxhost/jailcalls.py: a root command first enters its user
namespace, then loads the filter).
"""

from __future__ import annotations

import errno
import functools
import logging
import tempfile

log = logging.getLogger(__name__)

DENIED = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "name_to_handle_at",
    "quotactl",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "acct",
    "userfaultfd",
)
CLONE_NEW = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}


def _build() -> bytes:
    import pyseccomp as sc  # libseccomp through ctypes

    f = sc.SyscallFilter(sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            f.add_rule(deny, name)
        except (ValueError, RuntimeError, OSError):
            log.debug("seccomp: no syscall %s on this architecture", name)
    for flag in CLONE_NEW.values():
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


@functools.cache
def program() -> bytes | None:
    """The compiled BPF program, or None (loudly) when libseccomp is missing."""
    try:
        return _build()
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        log.critical("NO SECCOMP FILTER for sandboxes (libseccomp unusable: %s)", exc)
        return None
