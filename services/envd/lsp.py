"""A language server in the sandbox, spoken to over its stdio through envd.

Python first: ``pylsp`` (python-lsp-server with pyflakes): the sandbox
template's when it has pyflakes too, else installed inside the sandbox on first
use into ``/home/user/.agentbus/lsp`` (a venv: nothing comes from the host but
the sandbox's own python3). The server runs as an envd
process tagged ``agentbus-lsp-python``; a worker that did not start it (another
worker, a rebind) reattaches by tag with ``Connect`` and goes on without a
second ``initialize``. A rebuilt sandbox has no such process: a new one starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from typing import Any

from services.envd.client import EnvdClient
from services.envd.errors import EnvdError, EnvdNotFound, EnvdTimeout
from services.envd.process import ProcessEventStream

LSP_HOME = "/home/user/.agentbus/lsp"
TAG = "agentbus-lsp-python"
# The server to run: a template's pylsp when it lints (pyflakes importable),
# else one installed into a venv in the sandbox (once per sandbox); the path
# is the last line printed.
LOCATE = (
    "if python3 -c 'import pylsp, pyflakes' 2>/dev/null && command -v pylsp; then :;"
    f" else {{ [ -x {LSP_HOME}/bin/pylsp ] || {{ python3 -m venv {LSP_HOME} && "
    f"{LSP_HOME}/bin/pip install -q --disable-pip-version-check "
    "'python-lsp-server[pyflakes]>=1.12,<2'; }; } >&2 && "
    f"echo {LSP_HOME}/bin/pylsp; fi"
)
REQUEST_S = 30.0
Message = dict[str, Any]


def frame(message: Message) -> bytes:
    """One JSON-RPC message with its ``Content-Length`` header."""
    body = json.dumps(message).encode()
    return f"Content-Length: {len(body)}\r\n\r\n".encode() + body


class Frames:
    """Complete JSON-RPC messages out of a byte stream."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[Message]:
        self._buf += data
        out: list[Message] = []
        while True:
            head, sep, rest = self._buf.partition(b"\r\n\r\n")
            if not sep:
                return out
            length = _content_length(head)
            if len(rest) < length:
                return out
            body, self._buf = rest[:length], rest[length:]
            with contextlib.suppress(ValueError):
                out.append(json.loads(body))


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    raise EnvdError("lsp", "protocol", f"no Content-Length in {head[:100]!r}")


class LanguageServer:
    """One server process in one sandbox; requests, answers, diagnostics."""

    def __init__(self, client: EnvdClient, root: str) -> None:
        self.client = client
        self.root = root
        self.opened: dict[str, int] = {}  # uri -> version
        self.diagnostics: dict[str, list[Message]] = {}
        self._diag_seen: dict[str, asyncio.Event] = {}
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next = secrets.randbelow(1 << 30) * 1000
        self._frames = Frames()
        self._follow: asyncio.Task[None] | None = None
        self.ended = asyncio.Event()
        self.started = False  # this object started the process

    async def open(self) -> None:
        """Attach to the sandbox's server, or install and start one."""
        body: Message = {"process": {"tag": TAG}}
        ready: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._follow = asyncio.create_task(self._run(body, "Connect", ready))
        if await ready:
            return
        await self._follow
        found = await self.client.run(LOCATE, timeout_s=600)
        lines = found.stdout.decode("utf-8", "replace").split()
        if found.exit_code != 0 or not lines:
            text = found.stderr.decode("utf-8", "replace")
            raise EnvdError("lsp", "unavailable", f"install failed: {text[-500:]}")
        start = {
            "process": {"cmd": lines[-1], "cwd": self.root},
            "stdin": True,
            "tag": TAG,
        }
        ready = asyncio.get_running_loop().create_future()
        self._follow = asyncio.create_task(self._run(start, "Start", ready))
        if not await ready:
            raise EnvdError("lsp", "unavailable", "the language server did not start")
        self.started = True
        await self.request("initialize", _init_params(self.root))
        await self.notify("initialized", {})

    async def _run(
        self, body: Message, method: str, ready: asyncio.Future[bool]
    ) -> None:
        try:
            async with self.client.process_stream("lsp", body, method) as events:
                try:
                    first = await events.next()
                except EnvdNotFound:
                    first = None
                ready.set_result(first is not None and first.start is not None)
                if first is not None:
                    await self._pump(events)
        except EnvdError:
            if not ready.done():
                ready.set_result(False)
        finally:
            if ready.done() and ready.result():  # it was attached: now it is not
                self.ended.set()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(
                        EnvdError("lsp", "unavailable", "server ended")
                    )

    async def _pump(self, events: ProcessEventStream) -> None:
        while (event := await events.next()) is not None:
            if event.end is not None:
                return
            if event.data is not None and event.data.stdout:
                for message in self._frames.feed(event.data.stdout):
                    await self._handle(message)

    async def _handle(self, message: Message) -> None:
        if "method" not in message:
            future = self._pending.pop(message.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(message)
            return
        if message["method"] == "textDocument/publishDiagnostics":
            params = message.get("params") or {}
            uri = str(params.get("uri", ""))
            self.diagnostics[uri] = list(params.get("diagnostics") or [])
            self._diag_seen.setdefault(uri, asyncio.Event()).set()
        elif "id" in message:  # a request of the server's: answer "nothing"
            await self._send({"jsonrpc": "2.0", "id": message["id"], "result": None})

    async def _send(self, message: Message) -> None:
        await self.client.send_tagged_stdin(TAG, frame(message))

    async def notify(self, method: str, params: Message) -> None:
        """A notification (no answer)."""
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: Message) -> Any:
        """A request's ``result``; an error answer raises."""
        self._next += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[self._next] = future
        msg = {"jsonrpc": "2.0", "id": self._next, "method": method, "params": params}
        await self._send(msg)
        try:
            async with asyncio.timeout(REQUEST_S):
                answer = await future
        except TimeoutError:
            raise EnvdTimeout("lsp", REQUEST_S) from None
        finally:
            self._pending.pop(self._next, None)
        if "error" in answer:
            raise EnvdError("lsp", "server", str(answer["error"].get("message")))
        return answer.get("result")

    async def sync(self, uri: str, text: str) -> asyncio.Event:
        """Send the file's current text; the event is set by its next diagnostics."""
        seen = self._diag_seen[uri] = asyncio.Event()
        version = self.opened.get(uri, 0) + 1
        self.opened[uri] = version
        if version == 1:
            doc = {"uri": uri, "languageId": "python", "version": version, "text": text}
            await self.notify("textDocument/didOpen", {"textDocument": doc})
        else:
            await self.notify(
                "textDocument/didChange",
                {
                    "textDocument": {"uri": uri, "version": version},
                    "contentChanges": [{"text": text}],
                },
            )
        return seen

    async def close(self) -> None:
        """Stop following (the server keeps running in the sandbox)."""
        if self._follow is not None:
            self._follow.cancel()
            await asyncio.gather(self._follow, return_exceptions=True)


def _init_params(root: str) -> Message:
    return {
        "processId": None,
        "rootUri": f"file://{root}",
        "capabilities": {
            "textDocument": {
                "publishDiagnostics": {},
                "hover": {"contentFormat": ["plaintext"]},
                "documentSymbol": {"hierarchicalDocumentSymbolSupport": False},
            }
        },
    }
