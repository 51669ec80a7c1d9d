"""envd's Connect messages (proto3 JSON): one definition for client and server.

One definition per message: the client (``services/envd``) decodes them, the
sandbox host (``services/sandboxhost``) encodes them. proto3 JSON rules: camelCase
names, defaults omitted, bytes as padded base64, int64 as strings (both forms
decoded), enums by name (numbers decoded too), unknown fields ignored.
"""

from __future__ import annotations

from typing import Any

import msgspec


class EnvdMessage(msgspec.Struct, rename="camel", omit_defaults=True):
    """Base of proto3-JSON messages: camelCase keys, defaults omitted."""


class StartEvent(EnvdMessage):
    """``start``: the process is running with this pid."""

    pid: int = 0


class DataEvent(EnvdMessage):
    """``data``: one chunk of output; bytes arrive base64 and decode exactly."""

    stdout: bytes | None = None
    stderr: bytes | None = None
    pty: bytes | None = None


class EndEvent(EnvdMessage):
    """``end``: the process finished (the completion of a run)."""

    exit_code: int = 0
    exited: bool = False
    status: str = ""
    error: str | None = None


class ProcessEvent(EnvdMessage):
    """One event of a Start/Connect stream (a oneof)."""

    start: StartEvent | None = None
    data: DataEvent | None = None
    end: EndEvent | None = None
    keepalive: dict[str, Any] | None = None


class ProcessStreamMessage(EnvdMessage):
    """``StartResponse`` / ``ConnectResponse``."""

    event: ProcessEvent | None = None


class EntryInfo(EnvdMessage):
    """A filesystem entry as envd describes it."""

    name: str = ""
    type: str | int = "FILE_TYPE_UNSPECIFIED"
    path: str = ""
    size: int | str = 0
    mode: int = 0
    permissions: str = ""
    owner: str = ""
    group: str = ""
    modified_time: str | None = None
    symlink_target: str | None = None
    metadata: dict[str, str] | None = None
    is_symlink: bool = False

    @property
    def kind(self) -> str:
        """``file``, ``dir``, ``symlink`` or ``unknown`` (a symlink: its target's)."""
        names = {1: "file", 2: "dir", 3: "symlink"}
        if isinstance(self.type, int):
            return names.get(self.type, "unknown")
        return {
            "FILE_TYPE_FILE": "file",
            "FILE_TYPE_DIRECTORY": "dir",
            "FILE_TYPE_SYMLINK": "symlink",
        }.get(self.type, "unknown")

    @property
    def size_bytes(self) -> int:
        """Size as an int (int64 arrives as a JSON string)."""
        return int(self.size)


class EntryResponse(EnvdMessage):
    """``StatResponse`` / ``MakeDirResponse`` / ``MoveResponse``."""

    entry: EntryInfo | None = None


class ListDirResponse(EnvdMessage):
    """``ListDirResponse``."""

    entries: list[EntryInfo] = msgspec.field(default_factory=list)


class ConnectErrorBody(msgspec.Struct):
    """A Connect error: ``{"code": "not_found", "message": …}`` (envd: an int code)."""

    code: str | int | None = None
    message: str = ""


class EndOfStream(msgspec.Struct, omit_defaults=True):
    """The last envelope of a stream (flag ``0x02``): ``{}`` or the error."""

    error: ConnectErrorBody | None = None
