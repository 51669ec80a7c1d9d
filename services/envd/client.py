"""EnvdClient: a keep-alive aiohttp session speaking envd Connect JSON and /files."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

import aiohttp
import msgspec

from services.envd.errors import (
    EnvdError,
    EnvdNotFound,
    EnvdProtocolError,
    EnvdTimeout,
    EnvdUnavailable,
)
from services.envd.output import ExecResult, OutputCollector
from services.envd.process import (
    OnOutput,
    ProcessEventStream,
    RunState,
    drain_quietly,
    start_body,
    stop_command,
    wait_started,
)
from services.envd.wire import (
    EntryInfo,
    EntryResponse,
    ListDirResponse,
    UploadedFile,
    decode_as,
    encode_json,
    envelope,
    http_error,
)

ENVD_PORT = "49983"
_entry_decoder = msgspec.json.Decoder(EntryResponse)
_listdir_decoder = msgspec.json.Decoder(ListDirResponse)
_upload_decoder = msgspec.json.Decoder(list[UploadedFile])
_empty_decoder = msgspec.json.Decoder(dict[str, Any])
OnExit = Callable[[ExecResult], None]


def _headers(
    sandbox_id: str, access_token: str | None, user: str | None
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Headers for /files + /health, unary RPCs and streaming RPCs."""
    base = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": ENVD_PORT}
    if access_token:
        base["X-Access-Token"] = access_token
    rpc = {**base, "Connect-Protocol-Version": "1"}
    if user:
        rpc["Authorization"] = "Basic " + base64.b64encode(f"{user}:".encode()).decode()
    stream = {
        **rpc,
        "Content-Type": "application/connect+json",
        "Connect-Content-Encoding": "identity",
        "Connect-Accept-Encoding": "identity",
        "Accept-Encoding": "identity",
        "Keepalive-Ping-Interval": "50",
    }
    unary = {**rpc, "Content-Type": "application/json"}
    return {**base, "Accept-Encoding": "identity"}, unary, stream


class EnvdClient:
    """Client of one sandbox's envd; every HTTP request adds 1 to ``round_trips``."""

    def __init__(
        self,
        base_url: str,
        sandbox_id: str,
        access_token: str | None,
        *,
        session: aiohttp.ClientSession | None = None,
        user: str | None = "user",
        request_timeout_s: float = 30.0,
        output_cap: int = 1 << 20,
        spill_limit: int = 64 << 20,
        spill_dir: str = "/tmp/agentbus-spill",  # noqa: S108 - a path in the sandbox
        kill_grace_s: float = 2.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.sandbox_id = sandbox_id
        self.user = user
        self.request_timeout_s = request_timeout_s
        self.output_cap = output_cap
        self.spill_limit = spill_limit
        self.spill_dir = spill_dir.rstrip("/")
        self.kill_grace_s = kill_grace_s
        self.round_trips = 0
        self._session = session
        self._own_session = session is None
        self._background: dict[int, asyncio.Task[ExecResult]] = {}
        self._kills: set[asyncio.Task[Any]] = set()
        self._http_headers, self._unary_headers, self._stream_headers = _headers(
            sandbox_id, access_token, user
        )

    async def __aenter__(self) -> EnvdClient:
        self._http()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop following background commands (they keep running) and close."""
        tasks = list(self._background.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *self._kills, return_exceptions=True)
        self._background.clear()
        if self._own_session and self._session is not None:
            await self._session.close()
        self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=64, keepalive_timeout=300)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=None)
            )
            self._own_session = True
        return self._session

    def _query(self, path: str) -> dict[str, str]:
        return {"path": path, "username": self.user} if self.user else {"path": path}

    # ---- HTTP API -----------------------------------------------------------

    async def health(self) -> bool:
        """True when envd answers ``GET /health`` with 2xx."""
        try:
            async with self._request("health", "GET", "/health") as resp:
                await resp.read()
                return 200 <= resp.status < 300
        except EnvdError:
            return False

    async def read_bytes(self, path: str) -> bytes:
        """The file's bytes: one ``GET /files`` (1 round trip)."""
        async with self._request(
            "read", "GET", "/files", params=self._query(path)
        ) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise http_error(f"read {path}", resp.status, body)
            return body

    async def write_bytes(self, path: str, data: bytes) -> str:
        """Create or replace a file, parents included: one ``POST /files``."""
        headers = {"Content-Type": "application/octet-stream"}
        async with self._request(
            "write",
            "POST",
            "/files",
            params=self._query(path),
            data=data,
            headers=headers,
        ) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise http_error(f"write {path}", resp.status, body)
        written = decode_as("write", _upload_decoder, body)
        if not written:
            raise EnvdProtocolError("write", "empty upload answer")
        return str(written[0].path)

    # ---- Filesystem service -------------------------------------------------

    async def stat(self, path: str) -> EntryInfo:
        """Entry info of ``path`` (symlinks: ``is_symlink`` and ``symlink_target``)."""
        return self._entry(
            "stat",
            await self._unary(
                "filesystem.Filesystem/Stat", {"path": path}, _entry_decoder
            ),
        )

    async def list_dir(self, path: str, depth: int = 1) -> list[EntryInfo]:
        """Entries below ``path`` up to ``depth`` levels."""
        body = {"path": path, "depth": depth}
        resp = await self._unary(
            "filesystem.Filesystem/ListDir", body, _listdir_decoder
        )
        return list(resp.entries)

    async def make_dir(self, path: str) -> bool:
        """Create a directory and its parents; False if it already existed."""
        try:
            await self._unary(
                "filesystem.Filesystem/MakeDir", {"path": path}, _entry_decoder
            )
        except EnvdError as e:
            if e.code == "already_exists":
                return False
            raise
        return True

    async def move(self, src: str, dst: str) -> EntryInfo:
        """Rename ``src`` to ``dst`` (parents of ``dst`` created)."""
        body = {"source": src, "destination": dst}
        return self._entry(
            "move",
            await self._unary("filesystem.Filesystem/Move", body, _entry_decoder),
        )

    async def remove(self, path: str) -> None:
        """Remove a file or a tree; a missing path is not an error."""
        await self._unary(
            "filesystem.Filesystem/Remove", {"path": path}, _empty_decoder
        )

    @staticmethod
    def _entry(op: str, resp: EntryResponse) -> EntryInfo:
        if resp.entry is None:
            raise EnvdProtocolError(op, "answer has no entry")
        return resp.entry

    # ---- Process service ----------------------------------------------------

    async def run(
        self,
        cmd: str,
        *,
        cwd: str | None = None,
        envs: dict[str, str] | None = None,
        timeout_s: float | None = None,
        on_output: OnOutput | None = None,
        output_cap: int | None = None,
    ) -> ExecResult:
        """Run ``bash -c cmd`` in one streaming call; the ``end`` event completes it.

        On timeout or cancellation the process group is killed (SIGKILL).
        """
        collector = OutputCollector(output_cap or self.output_cap, self.spill_limit)
        state = RunState(collector, on_output)
        tag = "ab-" + secrets.token_hex(6)
        body = start_body(cmd, cwd, envs, stdin=False, tag=tag)
        lifetime = timeout_s + 5 * self.kill_grace_s if timeout_s else None
        # The stream lives in its own task: a cancel of the caller must not
        # close a request that may already have started the command.
        stream = asyncio.create_task(self._run_stream(body, state, lifetime, timeout_s))
        try:
            await asyncio.shield(stream)
        except asyncio.CancelledError:
            await self._abandon(stream, state, tag)
            raise
        return await self._result(state)

    async def _run_stream(
        self,
        body: dict[str, Any],
        state: RunState,
        lifetime_s: float | None,
        timeout_s: float | None,
    ) -> None:
        state.requested = True
        async with self._stream("run", body, lifetime_s) as events:
            await self._follow(events, state, timeout_s, body.get("tag"))
            await drain_quietly(events, self.kill_grace_s)

    async def _abandon(
        self, stream: asyncio.Task[None], state: RunState, tag: str
    ) -> None:
        """The caller was cancelled: kill the command wherever its start stands.

        The kill runs in a task of its own, so a second cancellation of the
        caller stops only the wait for it.
        """
        state.on_output = None
        task = asyncio.create_task(
            stop_command(stream, state, tag, self._signal, self.request_timeout_s)
        )
        self._kills.add(task)
        task.add_done_callback(self._kills.discard)
        with contextlib.suppress(EnvdError, TimeoutError):
            async with asyncio.timeout(self.request_timeout_s + self.kill_grace_s):
                await asyncio.shield(task)

    async def _follow(
        self,
        events: ProcessEventStream,
        state: RunState,
        timeout_s: float | None,
        tag: str | None,
    ) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await state.consume(events)
        except TimeoutError:
            state.timed_out = True
            if not state.pid:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.kill_grace_s):
                        await state.consume_until_started(events)
            await self._kill_detached(state.pid, tag)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.kill_grace_s):
                    await state.consume(events)
        if state.end is None and not state.timed_out:
            raise EnvdProtocolError("run", "command stream ended without an end event")

    async def _result(self, state: RunState) -> ExecResult:
        spill_path = None
        if state.collector.truncated:
            spill_path = f"{self.spill_dir}/{time.time_ns()}-{state.pid}.log"
            try:
                await self.write_bytes(spill_path, state.collector.spill_bytes())
            except EnvdError:
                spill_path = None
        return state.result(spill_path)

    async def start_background(
        self,
        cmd: str,
        *,
        cwd: str | None = None,
        envs: dict[str, str] | None = None,
        timeout_s: float | None = None,
        on_output: OnOutput | None = None,
        on_exit: OnExit | None = None,
    ) -> int:
        """Start a command with stdin open; return its pid once it is running.

        Its output is collected by a task of this client; ``wait(pid)`` returns it.
        """
        collector = OutputCollector(self.output_cap, self.spill_limit)
        state = RunState(collector, on_output)
        body = start_body(cmd, cwd, envs, stdin=True, tag=None)
        task = asyncio.create_task(
            self._follow_background(body, state, timeout_s, on_exit)
        )
        try:
            await _until_started(task, state)
        except BaseException:
            task.cancel()
            raise
        self._background[state.pid] = task
        return state.pid

    async def _follow_background(
        self,
        body: dict[str, Any],
        state: RunState,
        timeout_s: float | None,
        on_exit: OnExit | None,
    ) -> ExecResult:
        try:
            async with self._stream("start", body, timeout_s) as events:
                await _consume_until_deadline(events, state)
                await drain_quietly(events, self.kill_grace_s)
            result = await self._result(state)
        except BaseException:
            if on_exit is not None:
                on_exit(state.result(None))
            raise
        if on_exit is not None:
            on_exit(result)
        return result

    async def wait(self, pid: int, timeout_s: float | None = None) -> ExecResult:
        """The result of a background command started by this client."""
        task = self._background.get(pid)
        if task is None:
            raise EnvdNotFound("wait", f"no background command with pid {pid}")
        try:
            async with asyncio.timeout(timeout_s):
                result = await asyncio.shield(task)
        except TimeoutError:
            raise EnvdTimeout("wait", timeout_s or 0.0) from None
        self._background.pop(pid, None)
        return result

    async def send_stdin(self, pid: int, data: bytes) -> None:
        """Write bytes to a process's stdin."""
        body = {
            "process": {"pid": pid},
            "input": {"stdin": base64.b64encode(data).decode()},
        }
        await self._unary("process.Process/SendInput", body, _empty_decoder)

    async def close_stdin(self, pid: int) -> None:
        """Close a process's stdin (EOF)."""
        await self._unary(
            "process.Process/CloseStdin", {"process": {"pid": pid}}, _empty_decoder
        )

    def process_stream(
        self, op: str, body: dict[str, Any], method: str = "Start"
    ) -> contextlib.AbstractAsyncContextManager[ProcessEventStream]:
        """A raw ``Start``/``Connect`` event stream (the terminal follows a PTY)."""
        return self._stream(op, body, None, method)

    async def send_pty(self, selector: dict[str, Any], data: bytes) -> None:
        """Write bytes to a PTY process (selected by pid or tag)."""
        body = {"process": selector, "input": {"pty": base64.b64encode(data).decode()}}
        await self._unary("process.Process/SendInput", body, _empty_decoder)

    async def send_tagged_stdin(self, tag: str, data: bytes) -> None:
        """Write bytes to the stdin of the process tagged ``tag``."""
        body = {
            "process": {"tag": tag},
            "input": {"stdin": base64.b64encode(data).decode()},
        }
        await self._unary("process.Process/SendInput", body, _empty_decoder)

    async def kill_tagged(self, tag: str) -> bool:
        """SIGKILL the process tagged ``tag``; False if there is none."""
        return await self._signal({"tag": tag})

    async def kill(self, pid: int) -> bool:
        """SIGKILL the process (the host kills its whole group); False if unknown."""
        return await self._signal({"pid": pid})

    async def _signal(self, selector: dict[str, Any]) -> bool:
        body = {"process": selector, "signal": "SIGNAL_SIGKILL"}
        try:
            await self._unary("process.Process/SendSignal", body, _empty_decoder)
        except EnvdNotFound:
            return False
        return True

    async def _kill_detached(self, pid: int, tag: str | None) -> None:
        """Kill in a task that survives a second cancellation of the caller."""
        if not pid and not tag:
            return
        selector: dict[str, Any] = {"pid": pid} if pid else {"tag": tag}
        task = asyncio.create_task(self._signal(selector))
        self._kills.add(task)
        task.add_done_callback(self._kills.discard)
        with contextlib.suppress(EnvdError, TimeoutError):
            async with asyncio.timeout(self.kill_grace_s):
                await asyncio.shield(task)

    # ---- transport ------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _request(
        self, op: str, method: str, route: str, **kwargs: Any
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        extra = kwargs.pop("headers", None) or {}
        headers = {**self._http_headers, **extra}
        self.round_trips += 1
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        try:
            async with self._http().request(
                method,
                self.base_url + route,
                headers=headers,
                timeout=timeout,
                **kwargs,
            ) as resp:
                yield resp
        except TimeoutError:
            raise EnvdTimeout(op, self.request_timeout_s) from None
        except aiohttp.ClientError as e:
            raise EnvdUnavailable(op, str(e) or type(e).__name__) from e

    async def _unary(
        self, method: str, body: dict[str, Any], decoder: msgspec.json.Decoder[Any]
    ) -> Any:
        op = method.rsplit("/", 1)[-1]
        headers = {
            **self._unary_headers,
            "Connect-Timeout-Ms": str(int(self.request_timeout_s * 1000)),
        }
        self.round_trips += 1
        url = f"{self.base_url}/{method}"
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        try:
            async with self._http().post(
                url, data=encode_json(body), headers=headers, timeout=timeout
            ) as resp:
                data = await resp.read()
                status = resp.status
        except TimeoutError:
            raise EnvdTimeout(op, self.request_timeout_s) from None
        except aiohttp.ClientError as e:
            raise EnvdUnavailable(op, str(e) or type(e).__name__) from e
        if status != 200:
            raise http_error(op, status, data)
        return decode_as(op, decoder, data)

    @contextlib.asynccontextmanager
    async def _stream(
        self,
        op: str,
        body: dict[str, Any],
        lifetime_s: float | None,
        method: str = "Start",
    ) -> AsyncIterator[ProcessEventStream]:
        headers = dict(self._stream_headers)
        if lifetime_s:
            # envd kills the process at this deadline (for run: a safety net
            # should this client vanish before its own kill at the timeout).
            headers["Connect-Timeout-Ms"] = str(int(lifetime_s * 1000))
        self.round_trips += 1
        url = f"{self.base_url}/process.Process/{method}"
        timeout = aiohttp.ClientTimeout(total=None, connect=self.request_timeout_s)
        try:
            async with self._http().post(
                url, data=envelope(encode_json(body)), headers=headers, timeout=timeout
            ) as resp:
                if resp.status != 200:
                    raise http_error(op, resp.status, await resp.read())
                ctype = resp.headers.get("Content-Type", "")
                if not ctype.startswith("application/connect+json"):
                    raise EnvdProtocolError(op, f"unexpected content-type {ctype!r}")
                yield ProcessEventStream(op, resp)
        except aiohttp.ClientError as e:
            raise EnvdUnavailable(op, str(e) or type(e).__name__) from e


async def _until_started(task: asyncio.Task[ExecResult], state: RunState) -> None:
    """Wait for the ``start`` event, or re-raise why the stream ended first."""
    await wait_started(task, state)
    if not state.started.is_set():
        await task
        raise EnvdProtocolError("start", "command ended before its start event")


async def _consume_until_deadline(events: ProcessEventStream, state: RunState) -> None:
    """Follow a background command; envd ending it at its deadline is a timeout."""
    try:
        await state.consume(events)
    except EnvdError as e:
        if e.code != "deadline_exceeded":
            raise
        state.timed_out = True
