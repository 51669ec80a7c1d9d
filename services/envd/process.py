"""Reading a Start/Connect stream: events in order, the ``end`` event completes it."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from services.envd.errors import EnvdError, EnvdProtocolError, EnvdUnavailable
from services.envd.output import ExecResult, OutputChunk, OutputCollector, Stream
from services.envd.wire import (
    FLAG_END_STREAM,
    EndEvent,
    EnvelopeDecoder,
    ProcessEvent,
    decode_process_event,
    end_stream_error,
)

OnOutput = Callable[[OutputChunk], Awaitable[None]]
Signal = Callable[[dict[str, Any]], Awaitable[bool]]


class ProcessEventStream:
    """Pull decoded events from a streaming response; safe to cancel mid-read.

    State lives in the object (not in a generator frame), so a read interrupted by
    a timeout can be resumed to drain the remaining events.
    """

    def __init__(self, op: str, response: aiohttp.ClientResponse) -> None:
        self._op = op
        self._response = response
        self._decoder = EnvelopeDecoder(op)
        self._pending: deque[ProcessEvent | EnvdError] = deque()
        self.finished = False

    async def next(self) -> ProcessEvent | None:
        """The next event, or None once the stream has ended cleanly."""
        while not self._pending:
            if self.finished:
                return None
            try:
                chunk = await self._response.content.readany()
            except aiohttp.ClientError as e:
                raise EnvdUnavailable(self._op, f"stream broken: {e}") from e
            if not chunk:
                self.finished = True
                if self._decoder.pending:
                    raise EnvdProtocolError(self._op, "stream ended mid-envelope")
                return None
            self._take(chunk)
        item = self._pending.popleft()
        if isinstance(item, EnvdError):
            raise item
        return item

    def _take(self, chunk: bytes) -> None:
        for flags, payload in self._decoder.feed(chunk):
            if flags & FLAG_END_STREAM:
                self.finished = True
                error = end_stream_error(self._op, payload)
                if error is not None:
                    self._pending.append(error)
                return
            self._pending.append(decode_process_event(self._op, payload))


class RunState:
    """What one command has produced so far."""

    def __init__(self, collector: OutputCollector, on_output: OnOutput | None) -> None:
        self.collector = collector
        self.on_output = on_output
        self.pid = 0
        self.end: EndEvent | None = None
        self.timed_out = False
        self.started = asyncio.Event()
        self.requested = False  # the Start request is being (or was) sent

    async def consume(self, events: ProcessEventStream) -> None:
        """Apply events until the ``end`` event (the completion) or the stream ends."""
        while self.end is None:
            event = await events.next()
            if event is None:
                return
            await self.apply(event)

    async def consume_until_started(self, events: ProcessEventStream) -> None:
        """Apply events until the ``start`` event names the pid."""
        while not self.pid and self.end is None:
            event = await events.next()
            if event is None:
                return
            await self.apply(event)

    async def apply(self, event: ProcessEvent) -> None:
        """Apply one event."""
        if event.start is not None:
            self.pid = event.start.pid
            self.started.set()
        elif event.data is not None:
            await self._output(event)
        elif event.end is not None:
            self.end = event.end

    async def _output(self, event: ProcessEvent) -> None:
        data = event.data
        assert data is not None
        parts: tuple[tuple[Stream, bytes | None], ...] = (
            ("stdout", data.stdout),
            ("stderr", data.stderr),
            ("stdout", data.pty),
        )
        for stream, chunk in parts:
            if chunk:
                self.collector.add(stream, chunk)
                if self.on_output is not None:
                    await self.on_output(OutputChunk(stream, chunk))

    def result(self, spill_path: str | None) -> ExecResult:
        """The completion as plain data."""
        collector = self.collector
        end = self.end
        return ExecResult(
            exit_code=end.exit_code if end is not None else -1,
            stdout=bytes(collector.stdout),
            stderr=bytes(collector.stderr),
            truncated=collector.truncated,
            spill_path=spill_path,
            timed_out=self.timed_out,
            pid=self.pid,
            error=end.error if end is not None else "timed out",
            total_bytes=collector.total,
            tail=collector.tail() if collector.truncated else b"",
        )


def start_body(
    cmd: str,
    cwd: str | None,
    envs: dict[str, str] | None,
    *,
    stdin: bool,
    tag: str | None,
) -> dict[str, Any]:
    """``StartRequest`` for ``bash -c cmd`` (no login shell: it is faster)."""
    process: dict[str, Any] = {"cmd": "/bin/bash", "args": ["-c", cmd]}
    if envs:
        process["envs"] = envs
    if cwd is not None:
        process["cwd"] = cwd
    body: dict[str, Any] = {"process": process, "stdin": stdin}
    if tag is not None:
        body["tag"] = tag
    return body


async def drain_quietly(events: ProcessEventStream, timeout_s: float) -> None:
    """Read to the end-of-stream so the keep-alive connection can be reused."""
    try:
        async with asyncio.timeout(timeout_s):
            while await events.next() is not None:
                pass
    except (TimeoutError, EnvdError):
        pass


async def wait_started(task: asyncio.Task[Any], state: RunState) -> None:
    """Return once the ``start`` event arrived or ``task`` (its stream) ended."""
    started = asyncio.create_task(state.started.wait())
    try:
        await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        started.cancel()


async def stop_command(
    stream: asyncio.Task[Any],
    state: RunState,
    tag: str,
    signal: Signal,
    wait_s: float,
) -> None:
    """Kill an abandoned command by pid once its start event names it.

    Not by tag at once: the host registers the tag only once the command runs,
    so an early SendSignal answers not_found and the command starts after it.
    The start event on the still open stream names the pid as soon as it
    exists; the tag is the fallback for a slow host or a broken stream.
    """
    if not state.requested:
        stream.cancel()  # not sent: nothing can be running
        return
    try:
        if not await _started_within(stream, state, wait_s):
            with contextlib.suppress(EnvdError):
                await signal({"tag": tag})
            if not await _started_within(stream, state, wait_s):
                return
        if state.end is None and _may_be_running(stream, state):
            await signal({"pid": state.pid} if state.pid else {"tag": tag})
    finally:
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)


async def _started_within(
    stream: asyncio.Task[Any], state: RunState, wait_s: float
) -> bool:
    """True once the pid is known or the stream ended (nothing left to wait for)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(wait_s):
            await wait_started(stream, state)
    return bool(state.pid) or stream.done()


def _may_be_running(stream: asyncio.Task[Any], state: RunState) -> bool:
    """False only when the host answered without starting the command."""
    if state.pid or not stream.done() or stream.cancelled():
        return True
    error = stream.exception()
    # A refused request (bad cwd, auth, ...) started nothing; a broken
    # connection may have been cut after the host started the command.
    return error is None or isinstance(error, EnvdUnavailable)
