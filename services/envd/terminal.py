"""Persistent terminals: a PTY shell per id, living in the sandbox, not the worker.

Each terminal is an envd PTY process tagged ``agentbus-term-<id>`` running
``script -qf`` around an interactive bash: ``script`` keeps a transcript in
``/tmp/agentbus-term/<id>.log`` and the offset read so far beside it, so the
output produced between calls is kept, and a new worker (or a second one after
a SIGKILL) reattaches by tag and reads on from the same offset. Nothing lives
in the worker but a set of ids it has seen.

A call attaches to the PTY's event stream (``Connect`` by tag, or ``Start``
when there is none), writes the input, and waits until the shell's prompt
comes back (an invisible OSC marker in ``PS1``) or ``wait_ms`` passes; output
streams to ``on_output`` meanwhile. The result is the transcript since the
previous read, reduced to plain text and bounded (head and tail kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec

from services.envd.client import EnvdClient
from services.envd.errors import EnvdInvalidArgument, EnvdNotFound
from services.envd.output import Utf8Stream
from services.envd.process import ProcessEventStream
from services.envd.screen import plain_text

TERM_DIR = "/tmp/agentbus-term"  # noqa: S108 - a path in the sandbox
PROMPT_MARK = "\x1b]633;P\x07"
DEFAULT_WAIT_MS = 1500
MAX_WAIT_MS = 60_000
READY_S = 10.0
TERMINAL_CAP = 16 * 1024
_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_START = (
    'mkdir -p "$AB_DIR" && cd "$AB_DIR" && : > "$AB_ID.log" && echo 0 > "$AB_ID.off"'
    ' && echo \'PS1=$AB_PS1\' > "$AB_ID.rc" && cd "$OLDPWD" && exec script -qf'
    ' -c "bash --noprofile --rcfile $AB_DIR/$AB_ID.rc -i" "$AB_DIR/$AB_ID.log"'
)
_SCRIPT_NOTES = re.compile(r"^Script (started|done) on .*\n?", re.MULTILINE)
# The transcript since the saved offset: its size on the first line, then the
# bytes (head, a NUL, tail when longer than the cap); the offset moves on.
_READ = (
    'f="$AB_DIR/$AB_ID.log"; o=$(cat "$AB_DIR/$AB_ID.off" 2>/dev/null || echo 0); '
    's=$(stat -c %s -- "$f" 2>/dev/null || echo 0); [ "$s" -lt "$o" ] && o=0; '
    'echo "$s" > "$AB_DIR/$AB_ID.off"; n=$((s-o)); echo "$n"; '
    'if [ "$n" -le "$AB_CAP" ]; then tail -c +$((o+1)) -- "$f" | head -c "$n"; '
    'else tail -c +$((o+1)) -- "$f" | head -c "$AB_HEAD"; printf "\\0"; '
    'head -c "$s" -- "$f" | tail -c "$AB_TAIL"; fi'
)

OnTerminalText = Callable[[str], Awaitable[None]]


class TerminalOutput(msgspec.Struct, frozen=True, kw_only=True):
    """One terminal call: the plain-text transcript since the previous read."""

    id: str
    output: str
    started: bool = False  # a new shell was started for this call
    lost: bool = False  # a shell this worker used before is gone
    running: bool = False  # the prompt did not come back within wait_ms
    exited: bool = False  # the shell ended during the call
    closed: bool = False
    total_bytes: int = 0
    truncated: bool = False


def _tag(term_id: str) -> str:
    return f"agentbus-term-{term_id}"


class Terminals:
    """The terminals of one sandbox, driven through ``client_of()`` (rebinds
    replace the client)."""

    def __init__(
        self,
        client_of: Callable[[], EnvdClient],
        *,
        root: str = "/workspace",
        cap: int = TERMINAL_CAP,
    ) -> None:
        self._client_of = client_of
        self.root = root
        self.cap = cap
        self.seen: set[str] = set()

    async def call(
        self,
        term_id: str = "main",
        text: str | None = None,
        wait_ms: int | None = None,
        *,
        close: bool = False,
        on_output: OnTerminalText | None = None,
    ) -> TerminalOutput:
        """Send ``text`` (if any) to terminal ``term_id`` and read what it printed."""
        if not _ID.fullmatch(term_id):
            raise EnvdInvalidArgument("terminal", f"bad terminal id {term_id!r}")
        if close:
            return await self._close(term_id)
        wait_s = _wait_s(text, wait_ms)
        async with self._attached(term_id) as (events, started):
            lost = started and term_id in self.seen
            self.seen.add(term_id)
            watch = _Watch(events, on_output)
            if started:
                await watch.until_prompt(READY_S)
            if text:
                await self._client_of().send_pty({"tag": _tag(term_id)}, _typed(text))
            prompt = await watch.until_prompt(wait_s) if wait_s > 0 else False
        raw, total, cut = await self._read_since(term_id)
        return TerminalOutput(
            id=term_id,
            output=_transcript(raw),
            started=started,
            lost=lost,
            running=bool(wait_s) and not prompt and not watch.ended,
            exited=watch.ended,
            total_bytes=total,
            truncated=cut,
        )

    @contextlib.asynccontextmanager
    async def _attached(
        self, term_id: str
    ) -> AsyncIterator[tuple[ProcessEventStream, bool]]:
        """The PTY's event stream (past its start event) and whether it is new."""
        client = self._client_of()
        body: dict[str, Any] = {"process": {"tag": _tag(term_id)}}
        async with client.process_stream("terminal", body, "Connect") as events:
            try:
                first = await events.next()
            except EnvdNotFound:
                first = None
            if first is not None:
                yield events, False
                return
        async with client.process_stream("terminal", self._start(term_id)) as events:
            await events.next()  # the start event
            yield events, True

    def _start(self, term_id: str) -> dict[str, Any]:
        envs = {
            "AB_DIR": TERM_DIR,
            "AB_ID": term_id,
            "AB_PS1": "\\[\\e]633;P\\a\\]\\w\\$ ",
            "TERM": "xterm-256color",
            "SHELL": "/bin/bash",
            "HISTFILE": f"{TERM_DIR}/{term_id}.history",
        }
        process = {
            "cmd": "/bin/bash",
            "args": ["-c", _START],
            "envs": envs,
            "cwd": self.root,
        }
        size = {"rows": 40, "cols": 160}
        return {"process": process, "pty": {"size": size}, "tag": _tag(term_id)}

    async def _read_since(self, term_id: str) -> tuple[str, int, bool]:
        head = self.cap // 3
        envs = {
            "AB_DIR": TERM_DIR,
            "AB_ID": term_id,
            "AB_CAP": str(self.cap),
            "AB_HEAD": str(head),
            "AB_TAIL": str(self.cap - head),
        }
        result = await self._client_of().run(_READ, envs=envs, output_cap=2 * self.cap)
        first, _, data = result.stdout.partition(b"\n")
        total = int(first or b"0")
        if b"\0" not in data:
            return data.decode("utf-8", "replace"), total, False
        start, _, end = data.partition(b"\0")
        note = f"\n… [{total - len(start) - len(end)} bytes of output not shown] …\n"
        text = start.decode("utf-8", "replace") + note + end.decode("utf-8", "replace")
        return text, total, True

    async def _close(self, term_id: str) -> TerminalOutput:
        client = self._client_of()
        existed = await client.kill_tagged(_tag(term_id))
        raw, total, cut = await self._read_since(term_id)
        await client.run(f'rm -f -- "{TERM_DIR}/{term_id}".*')
        self.seen.discard(term_id)
        note = "" if existed else f"(terminal {term_id} was not running)"
        return TerminalOutput(
            id=term_id,
            output=_transcript(raw) + note,
            closed=True,
            total_bytes=total,
            truncated=cut,
        )


class _Watch:
    """Read a PTY's events: live text out, the prompt marker, the end."""

    def __init__(
        self, events: ProcessEventStream, on_output: OnTerminalText | None
    ) -> None:
        self.events = events
        self.on_output = on_output
        self.ended = False
        self._utf8 = Utf8Stream()
        self._recent = ""

    async def until_prompt(self, wait_s: float) -> bool:
        """True once the prompt marker arrived; False at the deadline or the end."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                while not self.ended:
                    if await self._step():
                        return True
        return False

    async def _step(self) -> bool:
        event = await self.events.next()
        if event is None or event.end is not None:
            self.ended = True
            return False
        if event.data is None or not event.data.pty:
            return False
        text = self._utf8.feed(event.data.pty)
        seen = self._recent + text
        self._recent = "" if PROMPT_MARK in seen else seen[-len(PROMPT_MARK) :]
        if self.on_output is not None and text:
            shown = plain_text(text.replace(PROMPT_MARK, ""))
            if shown:
                await self.on_output(shown)
        return PROMPT_MARK in seen


def _transcript(raw: str) -> str:
    """Plain text without the lines ``script`` adds at the start and the end."""
    return _SCRIPT_NOTES.sub("", plain_text(raw))


def _wait_s(text: str | None, wait_ms: int | None) -> float:
    if wait_ms is None:
        wait_ms = DEFAULT_WAIT_MS if text else 0
    if not 0 <= wait_ms <= MAX_WAIT_MS:
        raise EnvdInvalidArgument(
            "terminal", f"wait_ms must be between 0 and {MAX_WAIT_MS}"
        )
    return wait_ms / 1000


def _typed(text: str) -> bytes:
    """Input as typed; a line gets its Enter unless it ends with a control key."""
    if text and (text.endswith("\n") or ord(text[-1]) < 32):
        return text.encode()
    return (text + "\n").encode()
