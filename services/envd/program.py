"""``code`` programs: Python run in the sandbox, calling the agent's tools back.

The helper module (``services/envd/inside/agentbus_tools.py``) is written into
the sandbox once per sandbox (by content digest), the program beside it; then
``python3`` runs it there as a background envd process with stdin open. Each
tool call of the program arrives as one JSON line on the process's stderr; the
worker answers on its stdin with what ``inner`` returned. Stdout (the
program's output, stderr merged into it) streams to ``on_output``. A cancel or
a timeout kills the process group; nothing of the program runs outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from services.envd.client import EnvdClient
from services.envd.errors import EnvdError, EnvdInvalidArgument
from services.envd.output import OutputChunk, Utf8Stream

CODE_DIR = "/tmp/agentbus-code"  # noqa: S108 - a path in the sandbox
HELPER = Path(__file__).parent / "inside" / "agentbus_tools.py"
MAX_REQUEST = 8 << 20


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to one inner tool call, as the program sees it."""

    ok: bool
    output: str = ""
    error: str | None = None


Inner = Callable[[str, dict[str, Any]], Awaitable[Reply]]
OnProgramText = Callable[[str], Awaitable[None]]


class ProgramResult(msgspec.Struct, frozen=True, kw_only=True):
    """A finished program: its exit, its output and how many tools it called."""

    exit_code: int
    output: str
    timed_out: bool = False
    calls: int = 0


class _Lines:
    """Complete lines out of a byte stream."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        if len(self._buf) > MAX_REQUEST:
            raise EnvdInvalidArgument("code", "a tool request is too large")
        *lines, self._buf = self._buf.split(b"\n")
        return lines


class Programs:
    """Runs programs in one sandbox, through ``client_of()`` (follows rebinds)."""

    def __init__(
        self, client_of: Callable[[], EnvdClient], *, root: str = "/workspace"
    ) -> None:
        self._client_of = client_of
        self.root = root
        self._source = HELPER.read_bytes()
        self._helper = f"{CODE_DIR}/agentbus_tools.py"
        self._placed: str | None = None  # sandbox id the helper is known to be in

    async def run(
        self,
        program: str,
        inner: Inner,
        on_output: OnProgramText | None = None,
        timeout_s: float | None = None,
    ) -> ProgramResult:
        """Run ``program`` to its end (or timeout); tool calls go to ``inner``."""
        client = self._client_of()
        await self._place(client)
        path = f"{CODE_DIR}/{secrets.token_hex(8)}.py"
        await client.write_bytes(path, program.encode())
        try:
            return await self._follow(client, path, inner, on_output, timeout_s)
        finally:
            with contextlib.suppress(EnvdError):
                await asyncio.shield(client.remove(path))

    async def _place(self, client: EnvdClient) -> None:
        if self._placed == client.sandbox_id:
            return
        digest = hashlib.sha256(self._source).hexdigest()
        check = f"echo {digest}  {self._helper} | sha256sum -c --status"
        if (await client.run(check)).exit_code != 0:
            await client.write_bytes(self._helper, self._source)
        self._placed = client.sandbox_id

    async def _follow(
        self,
        client: EnvdClient,
        path: str,
        inner: Inner,
        on_output: OnProgramText | None,
        timeout_s: float | None,
    ) -> ProgramResult:
        session = _Session(inner, on_output)
        cmd = f'exec python3 -u "{self._helper}" "{path}"'
        pid = await client.start_background(
            cmd,
            cwd=self.root,
            timeout_s=timeout_s,
            on_output=session.take,
            on_exit=session.ended,
        )
        try:
            while (line := await session.requests.get()) is not None:
                reply = await session.serve(line)
                with contextlib.suppress(EnvdError):  # it may have exited meanwhile
                    await client.send_stdin(pid, msgspec.json.encode(reply) + b"\n")
            done = await client.wait(pid)
        except BaseException:
            with contextlib.suppress(EnvdError):
                await asyncio.shield(client.kill(pid))
            raise
        await session.flush()
        return ProgramResult(
            exit_code=done.exit_code,
            output=done.stdout.decode("utf-8", "replace"),
            timed_out=done.timed_out,
            calls=session.calls,
        )


class _Session:
    """One program's channel: requests queued in order, output passed on."""

    def __init__(self, inner: Inner, on_output: OnProgramText | None) -> None:
        self.inner = inner
        self.on_output = on_output
        self.requests: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.calls = 0
        self._lines = _Lines()
        self._utf8 = Utf8Stream()

    async def take(self, chunk: OutputChunk) -> None:
        if chunk.stream == "stderr":
            for line in self._lines.feed(chunk.data):
                self.requests.put_nowait(line)
            return
        text = self._utf8.feed(chunk.data)
        if text and self.on_output is not None:
            await self.on_output(text)

    def ended(self, _: object) -> None:
        self.requests.put_nowait(None)

    async def flush(self) -> None:
        text = self._utf8.flush()
        if text and self.on_output is not None:
            await self.on_output(text)

    async def serve(self, line: bytes) -> Reply:
        """One inner call: a malformed request is answered, never fatal."""
        self.calls += 1
        try:
            request = json.loads(line)
            tool, args = request["tool"], request.get("args") or {}
            if not isinstance(tool, str) or not isinstance(args, dict):
                raise TypeError("tool must be a string and args an object")
        except (ValueError, KeyError, TypeError) as exc:
            return Reply(ok=False, error=f"bad tool request: {exc}")
        return await self.inner(tool, args)
