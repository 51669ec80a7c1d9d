"""Directory watching for envd's WatchDir and the polling watcher RPCs (inotify).

The watched directory is opened by the supervisor inside the sandbox and handed
over as a descriptor, so the watch can only ever cover what the sandbox sees;
subdirectories are opened relative to it without following symlinks.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import struct
from collections.abc import Callable
from typing import Any

from services.sandboxhost.errors import EnvdRpcError

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_ISDIR = 0x40000000
IN_IGNORED = 0x8000
MASK = IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
HEADER = struct.Struct("iIII")
EVENT_TYPES = (
    (IN_CREATE | IN_MOVED_TO, "EVENT_TYPE_CREATE"),
    (IN_MODIFY, "EVENT_TYPE_WRITE"),
    (IN_DELETE, "EVENT_TYPE_REMOVE"),
    (IN_MOVED_FROM, "EVENT_TYPE_RENAME"),
    (IN_ATTRIB, "EVENT_TYPE_CHMOD"),
)

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
FsEvent = tuple[str, str]  # (name relative to the watched dir, EVENT_TYPE_*)


class DirWatch:
    """An inotify watch of one directory (optionally recursive)."""

    def __init__(
        self, dir_fd: int, recursive: bool, on_event: Callable[[FsEvent], None]
    ) -> None:
        self._fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            os.close(dir_fd)
            raise EnvdRpcError("internal", "inotify_init1 failed")
        self._recursive = recursive
        self._on_event = on_event
        self._prefix: dict[int, str] = {}
        self._loop = asyncio.get_running_loop()
        # Recursive watches keep the root open to reach directories made later.
        self._root_fd: int | None = dir_fd if recursive else None
        try:
            self._add(dir_fd, "")
        finally:
            if not recursive:
                os.close(dir_fd)
        self._loop.add_reader(self._fd, self._readable)

    def _add(self, dir_fd: int, prefix: str, announce: bool = False) -> None:
        """Watch a directory (and, if recursive, its subdirectories).

        ``announce``: the directory is new, so entries made in it before the
        watch existed are reported as created (nothing falls in the gap).
        """
        path = f"/proc/self/fd/{dir_fd}".encode()
        wd = _libc.inotify_add_watch(self._fd, path, MASK)
        if wd < 0:
            return
        self._prefix[wd] = prefix
        if not self._recursive:
            return
        for entry in os.scandir(dir_fd):
            if announce:
                self._on_event((prefix + entry.name, "EVENT_TYPE_CREATE"))
            if entry.is_dir(follow_symlinks=False):
                self._add_child(dir_fd, entry.name, prefix, announce)

    def _add_child(
        self, parent_fd: int, name: str, prefix: str, announce: bool = False
    ) -> None:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            child = os.open(name, flags, dir_fd=parent_fd)
        except OSError:
            return
        try:
            self._add(child, f"{prefix}{name}/", announce)
        finally:
            os.close(child)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        offset = 0
        while offset + HEADER.size <= len(data):
            wd, mask, _cookie, length = HEADER.unpack_from(data, offset)
            raw = data[offset + HEADER.size : offset + HEADER.size + length]
            offset += HEADER.size + length
            self._dispatch(wd, mask, raw.rstrip(b"\0").decode("utf-8", "replace"))

    def _dispatch(self, wd: int, mask: int, name: str) -> None:
        prefix = self._prefix.get(wd)
        if prefix is None or not name:
            return
        if self._recursive and mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
            self._watch_new_dir(prefix, name)
        for bits, kind in EVENT_TYPES:
            if mask & bits:
                self._on_event((prefix + name, kind))

    def _watch_new_dir(self, prefix: str, name: str) -> None:
        parent = self._parent_fd(prefix)
        if parent is None:
            return
        try:
            self._add_child(parent, name, prefix, announce=True)
        finally:
            os.close(parent)

    def _parent_fd(self, prefix: str) -> int | None:
        """Re-open a watched subdirectory (by its relative path) without symlinks."""
        if self._root_fd is None:
            return None
        fd = os.dup(self._root_fd)
        for part in [p for p in prefix.split("/") if p]:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                nxt = os.open(part, flags, dir_fd=fd)
            except OSError:
                os.close(fd)
                return None
            os.close(fd)
            fd = nxt
        return fd

    def close(self) -> None:
        """Stop watching."""
        if self._fd < 0:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
        if self._root_fd is not None:
            os.close(self._root_fd)
            self._root_fd = None


def fs_event(name: str, kind: str, entry: dict[str, Any] | None) -> dict[str, Any]:
    """FilesystemEvent JSON."""
    out: dict[str, Any] = {"name": name, "type": kind}
    if entry is not None:
        out["entry"] = entry
    return out
