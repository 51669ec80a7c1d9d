"""The agent's other hands: ``terminal``, ``code`` and ``lsp`` (args and rendering).

The work happens in the sandbox through the envd adapter
(:mod:`services.envd.terminal`, :mod:`services.envd.program`,
:mod:`services.envd.code_intel`); this module turns it into outcomes.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec

from services.envd import SandboxTools
from services.envd.program import Reply
from services.envd.terminal import TerminalOutput
from services.pool.outcome import Outcome, bounded

# Live output of a tool: (stream, text); stream is stdout, stderr or status.
OnUpdate = Callable[[str, str], Awaitable[None]]
# Runs one inner tool call of a ``code`` program (bad arguments: a failed outcome).
RunInner = Callable[[str, dict[str, Any]], Awaitable[Outcome]]
# What a ``code`` program can call.
CODE_INNER = ("read", "write", "edit", "ls", "glob", "grep", "bash")


class TerminalArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Type into a persistent terminal and read what it printed since last time."""

    input: str | None = None
    id: str = "main"
    wait_ms: int | None = None
    close: bool = False


class CodeArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A Python program run in the sandbox that calls the tools as functions."""

    program: str
    timeout_s: float = 300.0


class LspArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Ask the sandbox's language server about a file (1-based positions)."""

    action: Literal["diagnostics", "definition", "references", "hover", "symbols"]
    path: str
    line: int | None = None
    column: int | None = None


async def terminal(
    tools: SandboxTools, args: TerminalArgs, on_output: OnUpdate | None
) -> Outcome:
    """One terminal call, with notes on what happened to the shell."""

    async def live(text: str) -> None:
        if on_output is not None:
            await on_output("stdout", text)

    done = await tools.terminals.call(
        args.id, args.input, args.wait_ms, close=args.close, on_output=live
    )
    return Outcome(ok=True, output=_terminal_text(done), truncated=done.truncated)


def _terminal_text(done: TerminalOutput) -> str:
    notes = []
    if done.lost:
        notes.append(
            f"[terminal {done.id} was gone (the shell ended or the "
            "computer was rebuilt); a new shell was started]"
        )
    elif done.started:
        notes.append(f"[terminal {done.id}: new shell started]")
    notes.append(done.output)
    if done.running:
        notes.append(
            "[still running; call terminal again to read more, or send "
            "\\u0003 (Ctrl-C)]"
        )
    if done.exited:
        notes.append(f"[the shell of terminal {done.id} exited]")
    if done.closed:
        notes.append(f"[terminal {done.id} closed]")
    return "\n".join(n for n in notes if n)


async def code(
    tools: SandboxTools, args: CodeArgs, on_output: OnUpdate | None, run: RunInner
) -> Outcome:
    """Run a program; its tool calls run here, one ``status`` update each."""

    async def inner(tool: str, raw: dict[str, Any]) -> Reply:
        if tool not in CODE_INNER:
            return Reply(ok=False, error=f"no tool {tool!r} (have: {CODE_INNER})")
        if on_output is not None:
            shown = json.dumps(raw, ensure_ascii=False)
            await on_output("status", f"{tool} {shown[:300]}\n")
        return _reply(tool, await run(tool, raw))

    async def live(text: str) -> None:
        if on_output is not None:
            await on_output("stdout", text)

    done = await tools.programs.run(args.program, inner, live, args.timeout_s)
    text, cut = bounded(done.output, "program output cut")
    error = None
    if done.timed_out:
        error = f"timed out after {args.timeout_s} s; the program was killed"
    elif done.exit_code != 0:
        error = f"the program exited with {done.exit_code}"
    return Outcome(
        ok=error is None,
        output=text,
        error=error,
        truncated=cut,
        exit_code=done.exit_code,
    )


def _reply(tool: str, outcome: Outcome) -> Reply:
    """What the program's function returns (or raises) for one outcome."""
    if tool == "grep" and outcome.ok and outcome.exit_code == 1:
        return Reply(ok=True, output="")  # no match: no lines
    if outcome.ok:
        return Reply(ok=True, output=outcome.output)
    error = outcome.error or "failed"
    if outcome.output:
        error = f"{error}\n{outcome.output}"
    return Reply(ok=False, error=error)


async def lsp(tools: SandboxTools, args: LspArgs) -> Outcome:
    """One language-server question about a file inside the workspace."""
    resolved = await tools.resolve(args.path)
    text = await tools.language_servers.query(
        args.action, resolved.real, args.line, args.column
    )
    return Outcome(ok=True, output=text)
