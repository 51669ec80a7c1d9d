"""Workspace path policy (lexical, before any request) and the resolution cache."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from typing import Literal

import msgspec

from services.envd.errors import PathRefused
from services.envd.wire import EntryInfo

Kind = Literal["file", "dir", "missing", "other"]


class Resolved(msgspec.Struct, frozen=True):
    """A workspace path and where it really points inside the sandbox."""

    path: str
    real: str
    kind: Kind


class WorkspacePaths:
    """Turn a tool's path into an absolute sandbox path, or refuse it.

    Relative paths resolve against the workspace root; absolute paths must already
    be inside it (so host paths never reach the sandbox); ``..`` may not climb out.
    ``read_roots`` are extra trees that may be read but not written (spill files).
    """

    def __init__(
        self, root: str = "/workspace", read_roots: tuple[str, ...] = ()
    ) -> None:
        self.root = posixpath.normpath(root)
        self.read_roots = tuple(posixpath.normpath(r) for r in read_roots)

    def absolute(self, path: str, *, write: bool = False) -> str:
        """The normalised absolute path, refused if outside the allowed trees."""
        if not path or not path.strip():
            raise PathRefused(path, "empty path")
        if "\x00" in path:
            raise PathRefused(path, "NUL byte in path")
        if path.startswith("~"):
            raise PathRefused(path, "home-relative paths are not allowed")
        joined = path if path.startswith("/") else posixpath.join(self.root, path)
        normal = posixpath.normpath(joined)
        if normal.startswith("//"):
            normal = "/" + normal.lstrip("/")
        if not self.allows(normal, write=write):
            raise PathRefused(path, f"outside the workspace {self.root}")
        return normal

    def allows(self, normal: str, *, write: bool) -> bool:
        """Whether a normalised absolute path lies in an allowed tree."""
        roots = (self.root,) if write else (self.root, *self.read_roots)
        return any(normal == r or normal.startswith(r.rstrip("/") + "/") for r in roots)

    def relative(self, normal: str) -> str:
        """How to show a path to the model: relative to the root when inside it."""
        if normal == self.root:
            return "."
        prefix = self.root.rstrip("/") + "/"
        return normal[len(prefix) :] if normal.startswith(prefix) else normal


def resolved_from_entry(path: str, entry: EntryInfo) -> Resolved:
    """What a Stat/ListDir entry says about ``path`` (symlinks: their target)."""
    kind: Kind = {"file": "file", "dir": "dir"}.get(entry.kind, "other")  # type: ignore[assignment]
    if entry.is_symlink and entry.symlink_target:
        target = entry.symlink_target
        if not target.startswith("/"):
            target = posixpath.join(posixpath.dirname(path), target)
        return Resolved(path, posixpath.normpath(target), kind)
    return Resolved(path, path, kind)


class PathCache:
    """Resolutions valid for one generation.

    A generation ends when an agent command begins or ends. While a command runs
    (it may change the tree under us) entries also expire after ``running_ttl_s``.
    """

    def __init__(
        self, running_ttl_s: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.running_ttl_s = running_ttl_s
        self.generation = 0
        self.running = 0
        self._clock = clock
        self._entries: dict[str, tuple[int, float, Resolved]] = {}

    def begin_command(self) -> None:
        """An agent command starts: everything known may change."""
        self.generation += 1
        self.running += 1
        self._entries.clear()

    def end_command(self) -> None:
        """An agent command ended: what it did is unknown, start afresh."""
        self.generation += 1
        self.running = max(0, self.running - 1)
        self._entries.clear()

    def get(self, path: str) -> Resolved | None:
        """The cached resolution, if still valid."""
        item = self._entries.get(path)
        if item is None:
            return None
        generation, stamp, resolved = item
        if generation != self.generation:
            return None
        if self.running and self._clock() - stamp > self.running_ttl_s:
            del self._entries[path]
            return None
        return resolved

    def put(self, resolved: Resolved) -> None:
        """Remember a resolution for this generation."""
        self._entries[resolved.path] = (self.generation, self._clock(), resolved)

    def forget(self, path: str) -> None:
        """Drop one path (and everything below it)."""
        prefix = path.rstrip("/") + "/"
        for key in [k for k in self._entries if k == path or k.startswith(prefix)]:
            del self._entries[key]

    def ancestor_real(self, path: str) -> str | None:
        """``path`` rewritten through the nearest cached ancestor that is a symlink."""
        parent = posixpath.dirname(path)
        rest = posixpath.basename(path)
        while parent and parent != "/":
            hit = self.get(parent)
            if hit is not None and hit.real != hit.path:
                return posixpath.normpath(posixpath.join(hit.real, rest))
            rest = posixpath.join(posixpath.basename(parent), rest)
            parent = posixpath.dirname(parent)
        return None

    def __len__(self) -> int:
        return len(self._entries)
