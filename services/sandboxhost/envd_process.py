"""envd ``process.Process`` RPCs."""

from __future__ import annotations

import asyncio
import base64
import binascii
import signal
from typing import Any

from aiohttp import web

from services.sandboxhost.connect import (
    end_of_stream,
    envelope,
    first_envelope,
    open_stream,
    read_envelopes,
    rpc_user,
    timeout_ms,
    unary_body,
)
from services.sandboxhost.errors import EnvdError
from services.sandboxhost.processes import Event, SandboxProcess, set_winsize
from services.sandboxhost.sandbox import LocalSandbox

SIGNALS = {
    "SIGNAL_SIGKILL": signal.SIGKILL,
    "SIGNAL_SIGTERM": signal.SIGTERM,
    9: signal.SIGKILL,
    15: signal.SIGTERM,
}


def keepalive_interval(request: web.Request) -> float:
    """Seconds between keepalives (``Keepalive-Ping-Interval``, envd default 90)."""
    try:
        value = int(request.headers.get("Keepalive-Ping-Interval", "90"))
    except ValueError:
        value = 90
    return float(value if value > 0 else 90)


async def pump(
    request: web.Request,
    resp: web.StreamResponse,
    proc: SandboxProcess,
    queue: asyncio.Queue[Event | None],
) -> None:
    """Forward a process's events to the client until its end (or a disconnect).

    At the request's deadline the stream ends with ``deadline_exceeded`` (as
    connect-go does), which the SDK reports as a timeout.
    """
    loop = asyncio.get_running_loop()
    interval = keepalive_interval(request)
    limit = timeout_ms(request)
    deadline = loop.time() + limit if limit > 0 else None
    try:
        while True:
            wait = (
                interval if deadline is None else min(interval, deadline - loop.time())
            )
            event = await _next(queue, wait)
            if event is _TICK:
                if deadline is not None and loop.time() >= deadline:
                    proc.unsubscribe(queue)
                    await resp.write(end_of_stream(DEADLINE))
                    return
                await resp.write(envelope({"event": {"keepalive": {}}}))
                continue
            if event is None:
                break
            if proc.expired and "end" in event:
                # Killed by the deadline timer, which can beat this loop's own
                # tick: still a timeout to the client, not an exit of -1.
                proc.unsubscribe(queue)
                await resp.write(end_of_stream(DEADLINE))
                return
            if proc.expired:  # one by one, so the end above is never batched
                await resp.write(envelope({"event": event}))
            else:
                await resp.write(_coalesce(event, queue))
        # No end event: the sandbox was killed or stopped under the process.
        await resp.write(end_of_stream(None if proc.end is not None else GONE))
    except (ConnectionError, asyncio.CancelledError):
        # The client went away: envd keeps the process running.
        proc.unsubscribe(queue)
        raise


_TICK: Event = {}
DEADLINE = EnvdError("deadline_exceeded", "context deadline exceeded")
# E2B's words; "was not found" is what the SDK maps to SandboxNotRunningException.
GONE = EnvdError(
    "unavailable",
    "The sandbox was not found: the sandbox was killed or reached its end of life",
)


async def _next(queue: asyncio.Queue[Event | None], wait: float) -> Event | None:
    """The next event, or ``_TICK`` when ``wait`` seconds pass without one."""
    try:
        async with asyncio.timeout(max(wait, 0)):
            return await queue.get()
    except TimeoutError:
        return _TICK


def _coalesce(event: Event, queue: asyncio.Queue[Event | None]) -> bytes:
    """The event plus whatever is already queued behind it (one write)."""
    chunk = envelope({"event": event})
    while not queue.empty():
        more = queue.get_nowait()
        if more is None:
            queue.put_nowait(None)
            break
        chunk += envelope({"event": more})
    return chunk


async def start(request: web.Request, sandbox: LocalSandbox) -> web.StreamResponse:
    """Start a process and stream its events."""
    msg = await first_envelope(request)
    try:
        link, procs = sandbox.require_live()
        env = sandbox.base_env()
        env.update(
            {
                str(k): str(v)
                for k, v in (msg.get("process", {}).get("envs") or {}).items()
            }
        )
        root = rpc_user(request) == "root"  # uid 0 in its own user namespace
        if root:
            env.update(USER="root", LOGNAME="root")
        proc = await procs.start(link, msg, env, timeout_ms(request), root=root)
    except EnvdError as exc:
        return await _refuse(request, exc)
    return await _follow(request, proc)


async def connect(request: web.Request, sandbox: LocalSandbox) -> web.StreamResponse:
    """Attach to a running (or just finished) process's event stream."""
    msg = await first_envelope(request)
    try:
        _, procs = sandbox.require_live()
        proc = procs.find(msg.get("process") or {}, retained=True)
    except EnvdError as exc:
        return await _refuse(request, exc)
    return await _follow(request, proc)


async def _refuse(request: web.Request, exc: EnvdError) -> web.StreamResponse:
    """A stream that ends at once with the error (Connect's way to fail a stream)."""
    resp = await open_stream(request)
    await resp.write(end_of_stream(exc))
    return resp


async def _follow(request: web.Request, proc: SandboxProcess) -> web.StreamResponse:
    """The start event, then the process's events until its end."""
    queue = proc.subscribe()
    resp = await open_stream(request)
    await resp.write(envelope({"event": {"start": {"pid": proc.pid}}}))
    await pump(request, resp, proc, queue)
    return resp


async def list_processes(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """Running processes."""
    await unary_body(request)
    _, procs = sandbox.require_live()
    return {"processes": [p.info() for p in procs.running.values()]}


def _input_bytes(raw: dict[str, Any], proc: SandboxProcess) -> bytes:
    kind = "pty" if "pty" in raw else "stdin"
    if (kind == "pty") != proc.pty:
        raise EnvdError("internal", f"process {proc.pid} does not take {kind} input")
    try:
        return base64.b64decode(raw.get(kind) or "", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EnvdError("invalid_argument", "input is not base64") from exc


async def send_input(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """Write to a process's stdin or pty."""
    msg = await unary_body(request)
    _, procs = sandbox.require_live()
    proc = procs.find(msg.get("process") or {})
    await procs.write(proc, _input_bytes(msg.get("input") or {}, proc))
    return {}


async def stream_input(
    request: web.Request, sandbox: LocalSandbox
) -> web.StreamResponse:
    """Client-streamed input: ``start`` selects the process, ``data`` is written."""
    try:
        _, procs = sandbox.require_live()
        proc: SandboxProcess | None = None
        async for msg in read_envelopes(request):
            if "start" in msg:
                proc = procs.find((msg["start"] or {}).get("process") or {})
            elif "data" in msg:
                if proc is None:
                    raise EnvdError("failed_precondition", "data before start")
                raw = (msg["data"] or {}).get("input") or {}
                await procs.write(proc, _input_bytes(raw, proc))
            elif "keepalive" not in msg:
                raise EnvdError("unimplemented", "unknown stream input event")
    except EnvdError as exc:
        resp = await open_stream(request)
        await resp.write(end_of_stream(exc))
        return resp
    resp = await open_stream(request)
    await resp.write(envelope({}) + end_of_stream())
    return resp


async def send_signal(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """SIGTERM or SIGKILL a process's whole group."""
    msg = await unary_body(request)
    link, procs = sandbox.require_live()
    proc = procs.find(msg.get("process") or {})
    sig = SIGNALS.get(msg.get("signal", ""))
    if sig is None:
        raise EnvdError("unimplemented", "invalid signal")
    await link.call("signal", pid=proc.pid, sig=int(sig))
    return {}


async def close_stdin(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """Close a process's stdin pipe."""
    msg = await unary_body(request)
    _, procs = sandbox.require_live()
    procs.close_stdin(procs.find(msg.get("process") or {}))
    return {}


async def update(request: web.Request, sandbox: LocalSandbox) -> dict[str, Any]:
    """Resize a process's pty."""
    msg = await unary_body(request)
    _, procs = sandbox.require_live()
    proc = procs.find(msg.get("process") or {})
    size = (msg.get("pty") or {}).get("size")
    if size is None:
        return {}
    if not proc.pty or proc.input_fd is None:
        raise EnvdError("internal", f"process {proc.pid} has no pty")
    set_winsize(proc.input_fd, int(size.get("rows", 24)), int(size.get("cols", 80)))
    return {}
