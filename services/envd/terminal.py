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
ROTATE_BYTES = 1 << 20
# Between ``script`` and the transcript: a FIFO read by a small rotator
# (``<id>.log`` is renamed ``<id>.log.1`` when it holds AB_ROTATE bytes,
# ``<id>.gen`` counts the renames), so a chatty program fills at most two
# generations. It holds the FIFO open both ways (no EOF) and ends when the
# ``script`` process (argv 3) is gone. Without python3 in the sandbox (or if
# it is not ready in 3 s), script writes the log itself, unrotated.
_ROTATOR = (
    "import os,select,sys\n"
    "d,cap,pid=sys.argv[1],int(sys.argv[2]),int(sys.argv[3]); log=d+'.log'\n"
    "fd=os.open(d+'.pipe',os.O_RDWR); out=open(log,'ab',buffering=0); gen=0\n"
    "open(d+'.ready','w').close()\n"
    "while True:\n"
    "    if not select.select([fd],[],[],1.0)[0]:\n"
    "        try: os.kill(pid,0)\n"
    "        except OSError: break\n"
    "        continue\n"
    "    chunk=os.read(fd,65536)\n"
    "    while chunk:\n"
    "        if out.tell()>=cap:\n"
    "            out.close(); os.replace(log,log+'.1')\n"
    "            out=open(log,'ab',buffering=0); gen+=1\n"
    "            open(d+'.gen.t','w').write(str(gen))\n"
    "            os.replace(d+'.gen.t',d+'.gen')\n"
    "        n=out.write(chunk[:cap-out.tell()]); chunk=chunk[n:]\n"
)
_START = (
    'mkdir -p "$AB_DIR" && cd "$AB_DIR" && : > "$AB_ID.log" && echo 0 > "$AB_ID.off"'
    ' && rm -f "$AB_ID.log.1" "$AB_ID.gen" "$AB_ID.pipe" "$AB_ID.ready"'
    ' && echo \'PS1=$AB_PS1\' > "$AB_ID.rc" && out="$AB_DIR/$AB_ID.log"'
    ' && if command -v python3 >/dev/null && mkfifo -m 600 "$AB_ID.pipe"; then'
    ' python3 -c "$AB_ROTATOR" "$AB_DIR/$AB_ID" "$AB_ROTATE" $$'
    " </dev/null >/dev/null 2>&1 & i=0;"
    ' while [ ! -e "$AB_ID.ready" ] && [ $i -lt 300 ]; do sleep 0.01; i=$((i+1));'
    ' done; [ -e "$AB_ID.ready" ] && out="$AB_DIR/$AB_ID.pipe"; fi;'
    ' cd "$OLDPWD" && exec script -qf'
    ' -c "bash --noprofile --rcfile $AB_DIR/$AB_ID.rc -i" "$out"'
)
_SCRIPT_NOTES = re.compile(r"^Script (started|done) on .*\n?", re.MULTILINE)
# The transcript since the saved (generation, offset): "<bytes> <lost>" on the
# first line (lost: a whole generation was rotated away unread), then the bytes
# (head, a NUL, tail when longer than the cap); the saved place moves on.
_READ = (
    'd="$AB_DIR/$AB_ID"; f="$d.log"; g=$(cat "$d.gen" 2>/dev/null || echo 0); '
    'set -- $(cat "$d.off" 2>/dev/null || echo 0); '
    "if [ $# -ge 2 ]; then g0=$1; o=$2; else g0=$g; o=${1:-0}; fi; "
    # the call saw the prompt: wait (1 s at most) for the rotator to write it
    'i=0; while [ "$AB_SYNC" = 1 ] && [ $i -lt 100 ] && [ "$g0" = "$g" ] && '
    '! tail -c +$((o+1)) -- "$f" 2>/dev/null | grep -qa "633;P"; do '
    "sleep 0.01; i=$((i+1)); done; "
    's=$(stat -c %s -- "$f" 2>/dev/null || echo 0); p=""; k=0; lost=0; '
    'if [ "$g0" != "$g" ] || [ "$s" -lt "$o" ]; then p="$f.1"; '
    'k=$(stat -c %s -- "$p" 2>/dev/null || echo 0); '
    # same generation but a shorter log: rotated, its count not written yet
    'if [ "$g0" = "$g" ]; then g=$((g+1)); '
    'elif [ "$g0" -ne $((g-1)) ]; then lost=1; o=0; fi; '
    '[ "$k" -lt "$o" ] && o=0; fi; '
    'echo "$g $s" > "$d.off"; '
    'if [ -n "$p" ]; then n=$((k-o+s)); a=0; else n=$((s-o)); a=$o; fi; '
    'echo "$n $lost"; '
    'stream() { [ -n "$p" ] && tail -c +$((o+1)) -- "$p" | head -c $((k-o)); '
    'tail -c +$((a+1)) -- "$f" | head -c $((s-a)); }; '
    'if [ "$n" -le "$AB_CAP" ]; then stream; '
    'else stream | head -c "$AB_HEAD"; printf "\\0"; stream | tail -c "$AB_TAIL"; fi'
)

_DROPPED = "[earlier output was dropped unread: the transcript keeps {} bytes]\n"
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
        rotate: int = ROTATE_BYTES,
    ) -> None:
        self._client_of = client_of
        self.root = root
        self.cap = cap
        self.rotate = rotate
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
            ready = await watch.until_prompt(READY_S) if started else False
            if text:
                await self._client_of().send_pty({"tag": _tag(term_id)}, _typed(text))
            prompt = await watch.until_prompt(wait_s) if wait_s > 0 else False
        raw, total, cut = await self._read_since(term_id, sync=prompt or ready)
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
            "AB_ROTATOR": _ROTATOR,
            "AB_ROTATE": str(self.rotate),
        }
        process = {
            "cmd": "/bin/bash",
            "args": ["-c", _START],
            "envs": envs,
            "cwd": self.root,
        }
        size = {"rows": 40, "cols": 160}
        return {"process": process, "pty": {"size": size}, "tag": _tag(term_id)}

    async def _read_since(
        self, term_id: str, *, sync: bool = False
    ) -> tuple[str, int, bool]:
        head = self.cap // 3
        envs = {
            "AB_DIR": TERM_DIR,
            "AB_ID": term_id,
            "AB_CAP": str(self.cap),
            "AB_SYNC": "1" if sync else "0",
            "AB_HEAD": str(head),
            "AB_TAIL": str(self.cap - head),
        }
        result = await self._client_of().run(_READ, envs=envs, output_cap=2 * self.cap)
        first, _, data = result.stdout.partition(b"\n")
        total, _, lost = first.decode().partition(" ")
        dropped = "" if lost.strip() in ("", "0") else _DROPPED.format(self.rotate)
        if b"\0" not in data:
            return dropped + data.decode("utf-8", "replace"), int(total or 0), False
        start, _, end = data.partition(b"\0")
        note = (
            f"\n… [{int(total) - len(start) - len(end)} bytes of output not shown] …\n"
        )
        text = start.decode("utf-8", "replace") + note + end.decode("utf-8", "replace")
        return dropped + text, int(total), True

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
