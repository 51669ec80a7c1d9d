"""The host's end of the SOCK_SEQPACKET link to a sandbox's supervisor."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
from collections.abc import Callable
from typing import Any

from services.sandboxhost.errors import EnvdRpcError

CHUNK = 60000
MAX_MESSAGE = 64 * 1024 * 1024
CALL_TIMEOUT = 60.0
ExitCallback = Callable[[int, int], None]


class SupervisorLink:
    """Request/reply (with file descriptors) to one supervisor; exit events out."""

    def __init__(self, sock: socket.socket, on_exit: ExitCallback) -> None:
        self._sock = sock
        self._on_exit = on_exit
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[tuple[dict[str, Any], list[int]]]] = {}
        self._pending = b""
        self._loop = asyncio.get_running_loop()
        self.closed = asyncio.Event()
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self._readable)

    async def call(
        self, op: str, fds: list[int] | None = None, **args: Any
    ) -> tuple[dict[str, Any], list[int]]:
        """Send a request; return the reply and any received descriptors."""
        if self.closed.is_set():
            raise EnvdRpcError("unavailable", "sandbox supervisor is gone")
        rid = next(self._ids)
        fut = self._loop.create_future()
        self._waiting[rid] = fut
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                await self._send({"id": rid, "op": op, **args}, fds or [])
                reply, got = await fut
        except TimeoutError as exc:
            # Sandbox code can SIGSTOP its own supervisor; fail, never hang.
            raise EnvdRpcError(
                "unavailable", f"sandbox supervisor silent on {op}"
            ) from exc
        finally:
            self._waiting.pop(rid, None)
        if not reply.get("ok"):
            for fd in got:
                os.close(fd)
            raise EnvdRpcError(str(reply.get("code")), str(reply.get("msg")))
        return reply, got

    async def _send(self, msg: dict[str, Any], fds: list[int]) -> None:
        data = json.dumps(msg, separators=(",", ":")).encode()
        parts = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            packet = (b"." if last else b"+") + part
            await self._send_packet(packet, fds if last else [])

    async def _send_packet(self, packet: bytes, fds: list[int]) -> None:
        while True:
            try:
                if fds:
                    socket.send_fds(self._sock, [packet], fds)
                else:
                    self._sock.send(packet)
                return
            except BlockingIOError:
                await asyncio.sleep(0.001)
            except OSError as exc:
                self._close()
                raise EnvdRpcError("unavailable", f"sandbox supervisor: {exc}") from exc

    def _readable(self) -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self._sock, CHUNK + 16, 8)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not self._take(data, fds):
                return

    def _take(self, data: bytes, fds: list[int]) -> bool:
        """Add one packet; False once the link is closed (EOF or bad message)."""
        self._pending += data[1:]
        # A supervisor is sandbox code: never let it grow host memory or
        # feed the host garbage.
        if not data or len(self._pending) > MAX_MESSAGE:
            return self._reject(fds)
        if data[:1] == b"+":
            return True
        raw, self._pending = self._pending, b""
        try:
            msg = json.loads(raw)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            return self._reject(fds)
        self._deliver(msg, fds)
        return True

    def _reject(self, fds: list[int]) -> bool:
        for fd in fds:
            os.close(fd)
        self._close()
        return False

    def _deliver(self, msg: dict[str, Any], fds: list[int]) -> None:
        if "exit" in msg:
            self._on_exit(int(msg["exit"]), int(msg["status"]))
            return
        fut = self._waiting.get(int(msg.get("id", 0)))
        if fut is None or fut.done():
            for fd in fds:
                os.close(fd)
            return
        fut.set_result((msg, fds))

    def _close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        self._loop.remove_reader(self._sock.fileno())
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(
                    EnvdRpcError("unavailable", "sandbox supervisor is gone")
                )
        self._sock.close()

    def close(self) -> None:
        """Drop the link (the supervisor exits when it sees EOF)."""
        self._close()
