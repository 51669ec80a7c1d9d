"""The agent's tools: argument schemas, the model's tool specs, and dispatch.

Every tool runs in the session's sandbox through the envd adapter
(:class:`services.envd.SandboxTools`); this module has no other backend. Results
are bounded for the model; command output past the cap is in a spill file in
the sandbox, whose path the result names.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import aiohttp
import msgspec

from services.envd import (
    CommandOutput,
    EditResult,
    EnvdAuthError,
    EnvdError,
    EnvdUnavailable,
    GlobResult,
    LsResult,
    ReadResult,
    SandboxTools,
    WriteResult,
)
from services.pool.hands import (
    CodeArgs,
    LspArgs,
    OnUpdate,
    TerminalArgs,
    code,
    lsp,
    terminal,
)
from services.pool.outcome import MAX_OUTPUT_CHARS, Outcome, bounded

INFRA_UNAVAILABLE = "infrastructure_unavailable"


class ReadArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Lines of a text file."""

    path: str
    offset: int = 1
    limit: int = 2000


class WriteArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Create or replace a file."""

    path: str
    content: str


class EditArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Replace the one exact occurrence of ``old`` by ``new``."""

    path: str
    old: str
    new: str


class LsArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """List a directory."""

    path: str = "."


class GlobArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Workspace paths matching a pattern."""

    pattern: str


class GrepArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Lines matching a regular expression."""

    pattern: str
    path: str = "."


class BashArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Run a shell command in the workspace."""

    command: str
    timeout_s: float = 120.0


ToolArgs = (
    ReadArgs
    | WriteArgs
    | EditArgs
    | LsArgs
    | GlobArgs
    | GrepArgs
    | BashArgs
    | TerminalArgs
    | CodeArgs
    | LspArgs
)
# Tools whose output streams into ``tool.update`` while they run.
LIVE = (BashArgs, TerminalArgs, CodeArgs)

# Tools that change nothing: retrying one after any infrastructure failure is safe.
READ_ONLY = (ReadArgs, LsArgs, GlobArgs, GrepArgs, LspArgs)

ARGS: dict[str, type[ToolArgs]] = {
    "read": ReadArgs,
    "write": WriteArgs,
    "edit": EditArgs,
    "ls": LsArgs,
    "glob": GlobArgs,
    "grep": GrepArgs,
    "bash": BashArgs,
    "terminal": TerminalArgs,
    "code": CodeArgs,
    "lsp": LspArgs,
}

DESCRIPTIONS = {
    "read": "Read lines of a text file in the workspace (1-based offset, limit).",
    "write": "Create or replace a file in the workspace (parents are created).",
    "edit": "Replace the one exact occurrence of `old` by `new` in a file "
    "you have read; refused if the file changed since.",
    "ls": "List a directory of the workspace.",
    "glob": "Find workspace files by a bash globstar pattern, e.g. **/*.py.",
    "grep": "Search files for a regular expression (grep -rnE).",
    "bash": "Run a bash command in /workspace on the remote computer.",
    "terminal": "A persistent terminal (PTY) on the remote computer: `input` is "
    "typed (Enter added unless it ends with a control key such as \\u0003 for "
    "Ctrl-C); waits for the prompt up to `wait_ms` (default 1500); returns the "
    "output since the previous read. cwd, environment and running programs "
    "(REPLs, servers) persist across calls. `id` names another terminal; "
    "`close` ends one.",
    "code": "Run a Python program on the remote computer that calls the tools as "
    "plain functions: read(path), write(path, content), edit(path, old, new), "
    "ls(path), glob(pattern), grep(pattern, path=None), bash(command, "
    "timeout_s=None); each returns the text the tool shows you and raises "
    "ToolError when it fails. The result is what the program printed.",
    "lsp": "Ask a Python language server about a workspace file: diagnostics, "
    "symbols, or (with line and column, 1-based as editors show) definition, "
    "references, hover.",
}


class ToolArgsError(Exception):
    """The model's arguments do not fit the tool."""

    def __init__(self, tool: str, detail: str) -> None:
        self.tool = tool
        self.detail = detail
        super().__init__(f"bad arguments for {tool}: {detail}")


class Run(NamedTuple):
    """One try of a tool: its outcome, whether to bind again, whether a retry
    is safe (an infrastructure failure of a read, or of a call that never
    reached the sandbox)."""

    outcome: Outcome
    stale: bool
    retry_safe: bool


def specs() -> list[dict[str, Any]]:
    """OpenAI ``tools`` entries for every tool."""
    out = []
    for name, cls in ARGS.items():
        schema = msgspec.json.schema(cls)
        params = schema.get("$defs", {}).get(cls.__name__, schema)
        params = {k: v for k, v in params.items() if k != "title"}
        out.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": DESCRIPTIONS[name],
                    "parameters": params,
                },
            }
        )
    return out


def parse_args(tool: str, args: dict[str, Any]) -> ToolArgs:
    """Typed arguments, or :class:`ToolArgsError` naming the field at fault."""
    cls = ARGS.get(tool)
    if cls is None:
        raise ToolArgsError(tool, f"no such tool (have: {', '.join(ARGS)})")
    try:
        return msgspec.convert(args, cls)
    except msgspec.ValidationError as exc:
        raise ToolArgsError(tool, str(exc)) from exc


async def execute(
    tools: SandboxTools, args: ToolArgs, on_output: OnUpdate | None = None
) -> Run:
    """Run one tool in the sandbox; envd failures become failed outcomes.

    ``on_output`` gets a ``bash`` command's output live. An unreachable or
    token-refusing sandbox is our infrastructure's failure: the outcome carries
    ``infrastructure_unavailable`` and the binding is stale (bind again).
    """
    try:
        return Run(await _dispatch(tools, args, on_output), False, False)
    except (EnvdAuthError, EnvdUnavailable) as exc:
        safe = isinstance(args, READ_ONLY) or never_started(exc)
        outcome = Outcome(ok=False, error=str(exc), error_code=INFRA_UNAVAILABLE)
        return Run(outcome, True, safe)
    except EnvdError as exc:
        return Run(Outcome(ok=False, error=str(exc)), False, False)


def never_started(exc: EnvdError) -> bool:
    """True if the request cannot have reached the sandbox: the connection was
    refused or could not be made, or the token was refused before any work."""
    if isinstance(exc, EnvdAuthError):
        return True
    return isinstance(exc.__cause__, aiohttp.ClientConnectorError)


async def _dispatch(
    tools: SandboxTools, args: ToolArgs, on_output: OnUpdate | None
) -> Outcome:
    match args:
        case ReadArgs():
            return _read(await tools.read(args.path, args.offset, args.limit))
        case WriteArgs():
            return _wrote(await tools.write(args.path, args.content))
        case EditArgs():
            return _edited(await tools.edit(args.path, args.old, args.new))
        case LsArgs():
            return _listed(await tools.ls(args.path))
        case GlobArgs():
            return _globbed(await tools.glob(args.pattern))
        case GrepArgs():
            return _command(await tools.grep(args.pattern, args.path), grep=True)
        case BashArgs():
            return _command(await tools.bash(args.command, args.timeout_s, on_output))
        case TerminalArgs() | CodeArgs() | LspArgs():
            return await _other_hands(tools, args, on_output)


async def _other_hands(
    tools: SandboxTools,
    args: TerminalArgs | CodeArgs | LspArgs,
    on_output: OnUpdate | None,
) -> Outcome:
    match args:
        case TerminalArgs():
            return await terminal(tools, args, on_output)
        case CodeArgs():
            return await code(tools, args, on_output, _inner(tools))
        case LspArgs():
            return await lsp(tools, args)


def _read(result: ReadResult) -> Outcome:
    if result.binary:
        return Outcome(ok=True, output=f"{result.path} is a binary file")
    end = result.start_line + result.line_count - 1
    text, cut = bounded(
        result.content, f"cut at {MAX_OUTPUT_CHARS} characters; read on with offset"
    )
    if end < result.total_lines or cut:
        text += f"\n[lines {result.start_line}-{end} of {result.total_lines}]"
    return Outcome(ok=True, output=text, truncated=cut)


def _wrote(result: WriteResult) -> Outcome:
    verb = "created" if result.created else "wrote"
    return Outcome(
        ok=True, output=f"{verb} {result.path} ({result.bytes_written} bytes)"
    )


def _edited(result: EditResult) -> Outcome:
    return Outcome(
        ok=True, output=f"edited {result.path} ({result.bytes_written} bytes)"
    )


def _listed(result: LsResult) -> Outcome:
    lines = []
    for entry in result.entries:
        mark = "/" if entry.kind == "dir" else ""
        link = f" -> {entry.symlink_target}" if entry.symlink_target else ""
        lines.append(f"{entry.name}{mark}\t{entry.size}{link}")
    text, cut = bounded("\n".join(lines) or "(empty)", "listing cut")
    return Outcome(ok=True, output=text, truncated=cut)


def _globbed(result: GlobResult) -> Outcome:
    text, cut = bounded("\n".join(result.paths) or "(no matches)", "matches cut")
    if result.truncated:
        text += "\n[more matches not shown; narrow the pattern]"
    return Outcome(ok=True, output=text, truncated=cut or result.truncated)


def _command(result: CommandOutput, *, grep: bool = False) -> Outcome:
    if grep and result.exit_code == 1 and not result.output:
        return Outcome(ok=True, output="(no matches)", exit_code=1)
    ok = result.exit_code == 0 and not result.timed_out
    error = None
    if result.timed_out:
        error = "timed out; the command's process group was killed"
    elif not ok:
        error = f"exit code {result.exit_code}"
    return Outcome(
        ok=ok,
        output=result.output,
        error=error,
        truncated=result.truncated,
        spill_path=result.spill_path,
        exit_code=result.exit_code,
    )


def _inner(tools: SandboxTools) -> Callable[[str, dict[str, Any]], Awaitable[Outcome]]:
    """A ``code`` program's tool calls: the same parsing and dispatch as the model's."""

    async def run(tool: str, raw: dict[str, Any]) -> Outcome:
        try:
            typed = parse_args(tool, raw)
        except ToolArgsError as exc:
            return Outcome(ok=False, error=str(exc))
        return (await execute(tools, typed)).outcome

    return run
