"""Command output: exact bytes, a cap, the full log kept for spilling, UTF-8 text."""

from __future__ import annotations

import codecs
from collections.abc import Awaitable, Callable
from typing import Literal

import msgspec

Stream = Literal["stdout", "stderr"]
OnText = Callable[[Stream, str], Awaitable[None]]


class OutputChunk(msgspec.Struct, frozen=True):
    """One live chunk of a running command's output, bytes exactly as produced."""

    stream: Stream
    data: bytes


class ExecResult(msgspec.Struct, frozen=True, kw_only=True):
    """The completion of one command.

    ``stdout``/``stderr`` hold at most the cap's first bytes of each stream; when
    ``truncated`` the whole output (both streams in arrival order) was written to
    ``spill_path`` inside the sandbox and ``tail`` holds its last bytes.
    """

    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool = False
    spill_path: str | None = None
    timed_out: bool = False
    pid: int = 0
    error: str | None = None
    total_bytes: int = 0
    tail: bytes = b""


class OutputCollector:
    """Accumulate a command's output under a cap, keeping the log for a spill file."""

    def __init__(self, cap: int, spill_limit: int) -> None:
        self.cap = cap
        self.spill_limit = spill_limit
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.total = 0
        self.truncated = False
        self.log_complete = True
        self._log: list[bytes] = []
        self._logged = 0

    def add(self, stream: Stream, data: bytes) -> None:
        """Take one chunk; bytes beyond the cap only go to the spill log."""
        self.total += len(data)
        head = self.stdout if stream == "stdout" else self.stderr
        room = self.cap - len(head)
        if room >= len(data):
            head += data
        else:
            head += data[: max(room, 0)]
            self.truncated = True
        if self._logged + len(data) <= self.spill_limit:
            self._log.append(data)
            self._logged += len(data)
        else:
            self.log_complete = False

    def spill_bytes(self) -> bytes:
        """Everything logged, both streams in arrival order."""
        return b"".join(self._log)

    def tail(self) -> bytes:
        """The last ``cap`` bytes of the logged output."""
        out = bytearray()
        for chunk in reversed(self._log):
            out[:0] = chunk
            if len(out) >= self.cap:
                break
        return bytes(out[-self.cap :]) if self.cap else b""


class Utf8Stream:
    """Incremental UTF-8 decoder: a character split across chunks decodes whole."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> str:
        """Decode a chunk, holding back an incomplete trailing character."""
        return self._decoder.decode(data)

    def flush(self) -> str:
        """Decode what is held back (a truly truncated character becomes U+FFFD)."""
        return self._decoder.decode(b"", final=True)


class TextFeed:
    """Turn live output chunks into text per stream, exact across chunk splits."""

    def __init__(self, on_text: OnText) -> None:
        self._on_text = on_text
        self._decoders = {"stdout": Utf8Stream(), "stderr": Utf8Stream()}

    async def feed(self, chunk: OutputChunk) -> None:
        """Decode one chunk; an incomplete trailing character waits for the next."""
        text = self._decoders[chunk.stream].feed(chunk.data)
        if text:
            await self._on_text(chunk.stream, text)

    async def flush(self) -> None:
        """Deliver what is held back once the command ended."""
        for stream in ("stdout", "stderr"):
            text = self._decoders[stream].flush()
            if text:
                await self._on_text(stream, text)


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def utf8_head(data: bytes) -> bytes:
    """``data`` without a partial UTF-8 character at its end."""
    i = len(data)
    back = 0
    while i > 0 and back < 4 and _is_continuation(data[i - 1]):
        i -= 1
        back += 1
    if i == 0:
        return data
    lead = data[i - 1]
    need = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4
    if lead >= 0xC0 and back + 1 < need:
        return data[: i - 1]
    return data


def utf8_tail(data: bytes) -> bytes:
    """``data`` without continuation bytes of a character cut at its start."""
    i = 0
    while i < len(data) and i < 3 and _is_continuation(data[i]):
        i += 1
    return data[i:]
