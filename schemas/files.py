"""The file API between gateway and broker, over NATS request/reply (no HTTP).

Bytes travel in bounded chunks so neither side holds a whole file:

* ``<prefix>.broker.files.stat``  — :class:`FileStat` → :class:`FileInfo`.
  For a file the broker stages it (from the sandbox, or from the archive without
  waking one) and returns a ``handle`` to read from.
* ``<prefix>.broker.files.read``  — :class:`FileRead` → raw bytes of one chunk;
  header ``Agentbus-Eof: 1`` on the last.
* ``<prefix>.broker.files.write`` — headers ``Agentbus-Session``, ``Agentbus-Path``,
  ``Agentbus-Upload`` (client-chosen id), ``Agentbus-Offset``, ``Agentbus-Eof``;
  body = one chunk → :class:`FileWritten` (``size`` set on the final chunk).
Errors answer :class:`FileError` JSON with header ``Agentbus-Error: 1``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

CHUNK_SIZE = 256 * 1024
EOF_HEADER = "Agentbus-Eof"
ERROR_HEADER = "Agentbus-Error"
SESSION_HEADER = "Agentbus-Session"
PATH_HEADER = "Agentbus-Path"
UPLOAD_HEADER = "Agentbus-Upload"
OFFSET_HEADER = "Agentbus-Offset"
MAX_PATH = 4096


def workspace_relative(path: str) -> str:
    """The normalised workspace-relative form of ``path`` (lexical check only).

    Raises ``ValueError`` naming what is wrong for a NUL byte, an over-long or
    absolute path, or a ``..`` component. The gateway and the broker both use
    this one check; symlinks are resolved by the broker, which sees the files.
    """
    if "\x00" in path:
        raise ValueError("the path contains a NUL byte")
    if len(path) > MAX_PATH:
        raise ValueError(f"the path is longer than {MAX_PATH} characters")
    if path.startswith("/"):
        raise ValueError(f"path {path[:200]!r} is absolute")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError("'..' is not allowed in paths")
    return "/".join(parts)


class FileStat(msgspec.Struct, frozen=True, kw_only=True):
    """Ask what is at a workspace-relative path (already validated by the gateway)."""

    session_id: str
    path: str


class DirEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One directory entry as docs/api.md shows it."""

    name: str
    type: Literal["file", "dir", "symlink"]
    size: int
    modified: str


class FileInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A file (read it by ``handle``) or a directory listing."""

    kind: Literal["file", "dir"]
    size: int = 0
    handle: str | None = None
    entries: list[DirEntry] = []
    source: Literal["sandbox", "archive"] = "sandbox"


class FileRead(msgspec.Struct, frozen=True, kw_only=True):
    """Read ``length`` bytes at ``offset`` of a staged file."""

    handle: str
    offset: int
    length: int = CHUNK_SIZE


class FileWritten(msgspec.Struct, frozen=True, kw_only=True):
    """Answer to a write chunk; ``size`` is the file size after the final chunk."""

    path: str
    size: int


class FileError(msgspec.Struct, frozen=True, kw_only=True):
    """A typed failure; ``code`` as in docs/api.md (``not_found`` …)."""

    code: str
    message: str
    status: int = 400
