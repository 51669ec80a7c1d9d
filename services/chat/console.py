"""The interactive loop: stdin lines become prompts, approvals or commands."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from typing import Any

import aiohttp

from services.chat.follow import Event, Follower, StreamDenied
from services.chat.view import OPTIONS, View

HELP = (
    "type a prompt and Enter (it queues while a turn runs); when asked, 1-4 "
    "answers the approval; /cancel stops the turn; /quit or Ctrl-D leaves"
)


class Console:
    """One attached session: follows its stream and acts on typed lines."""

    def __init__(
        self, http: aiohttp.ClientSession, base: str, sid: str, view: View
    ) -> None:
        self._http = http
        self._session = f"{base}/v1/sessions/{sid}"
        self._view = view
        self._pending: list[str] = []  # unanswered request ids, oldest first
        self._dropped = False
        self.follower = Follower(
            http, f"{self._session}/events", self.on_event, self.on_state
        )

    async def on_event(self, ev: Event) -> None:
        """Show an event and keep track of open approvals."""
        data: dict[str, Any] = ev.get("data") or {}
        if ev.get("type") == "permission.requested":
            self._pending.append(str(data.get("request_id")))
        elif ev.get("type") == "permission.resolved":
            rid = str(data.get("request_id"))
            self._pending = [r for r in self._pending if r != rid]
        self._view.show(ev)

    def on_state(self, state: str) -> None:
        """Say when the stream drops and when it is back (resumed by seq)."""
        if state == "reconnecting" and not self._dropped:
            self._dropped = True
            self._view.line("· connection lost; reconnecting…")
        elif state == "live" and self._dropped:
            self._dropped = False
            self._view.line(f"· reconnected (resumed after seq {self.follower.last})")

    async def handle(self, line: str) -> bool:
        """Act on one typed line; False to quit."""
        text = line.strip()
        if text in {"/quit", "/exit"}:
            return False
        if not text:
            return True
        if text == "/help":
            self._view.line(HELP)
        elif text == "/cancel":
            await self._post("/cancel", None, {409: "· no turn is running"})
        elif self._pending and text in {"1", "2", "3", "4", *OPTIONS}:
            option = OPTIONS[int(text) - 1] if text.isdigit() else text
            rid = self._pending[0]
            await self._post(f"/permissions/{rid}", {"option": option},
                             {409: "· already answered"})  # fmt: skip
        else:
            body = {"text": text, "client_msg_id": uuid.uuid4().hex}
            await self._post("/prompt", body, {})
        return True

    async def _post(self, path: str, body: object, known: dict[int, str]) -> None:
        try:
            async with self._http.post(self._session + path, json=body) as r:
                if r.status in known:
                    self._view.line(known[r.status])
                elif r.status >= 300:
                    self._view.line(f"! {r.status}: {await r.text()}")
        except aiohttp.ClientError as exc:
            self._view.line(f"! not sent ({exc.__class__.__name__}); try again")

    async def run(self) -> int:
        """Read stdin until /quit or EOF while the stream runs; the exit status."""
        stream = asyncio.create_task(self.follower.run())
        typing = asyncio.create_task(self._read_stdin())
        try:
            done, _ = await asyncio.wait(
                {stream, typing}, return_when=asyncio.FIRST_COMPLETED
            )
            if stream in done and isinstance(stream.exception(), StreamDenied):
                self._view.line("! the session is not available to this token")
                return 1
            return 0
        finally:
            for task in (stream, typing):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _read_stdin(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
        )
        try:
            while line := await reader.readline():
                if not await self.handle(line.decode("utf-8", "replace")):
                    return
        finally:
            transport.close()
