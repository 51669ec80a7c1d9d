"""The agent's tools as plain functions, for a ``code`` program in the sandbox.

Placed in the sandbox by the code tool and run there: each function sends one
request (a JSON line) on the channel (the process's original stderr) and reads
the answer (a JSON line) from stdin. The worker runs the same tool the model
would call and answers with the text the model would see; a failed tool raises
:class:`ToolError`. The program's own stdout and stderr are its output.
Standard library only: it runs on whatever python3 the sandbox has.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from typing import IO, Any

_io: dict[str, IO[str]] = {}


class ToolError(Exception):
    """A tool call failed (the message is what the model would have seen)."""


def _call(tool: str, **args: Any) -> str:
    sys.stdout.flush()
    request = {"tool": tool, "args": {k: v for k, v in args.items() if v is not None}}
    _io["channel"].write(json.dumps(request) + "\n")
    _io["channel"].flush()
    line = _io["replies"].readline()
    if not line:
        raise ToolError("the tool channel closed")
    reply = json.loads(line)
    if not reply.get("ok"):
        raise ToolError(reply.get("error") or f"{tool} failed")
    return str(reply.get("output", ""))


def read(path: str, offset: int | None = None, limit: int | None = None) -> str:
    """The file's content (lines ``offset``.. like the read tool)."""
    return _call("read", path=path, offset=offset, limit=limit)


def write(path: str, content: str) -> str:
    """Create or replace a file."""
    return _call("write", path=path, content=content)


def edit(path: str, old: str, new: str) -> str:
    """Replace the one exact occurrence of ``old``."""
    return _call("edit", path=path, old=old, new=new)


def ls(path: str = ".") -> str:
    """A directory listing."""
    return _call("ls", path=path)


def glob(pattern: str) -> str:
    """Matching workspace paths, one a line."""
    return _call("glob", pattern=pattern)


def grep(pattern: str, path: str | None = None) -> str:
    """One ``path:line:text`` per match ("" for none)."""
    return _call("grep", pattern=pattern, path=path)


def bash(command: str, timeout_s: float | None = None) -> str:
    """The command's output (stderr merged); a non-zero exit raises."""
    return _call("bash", command=command, timeout_s=timeout_s)


TOOLS = {f.__name__: f for f in (read, write, edit, ls, glob, grep, bash)}


def main(program: str) -> None:
    """Run ``program`` with the tools in its globals; stderr joins stdout."""
    _io["channel"] = os.fdopen(os.dup(2), "w")
    _io["replies"] = os.fdopen(os.dup(0), "r")
    os.dup2(1, 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the program's stdin, for its life
    names: dict[str, Any] = {**TOOLS, "ToolError": ToolError}
    runpy.run_path(program, init_globals=names, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1])
