"""The gateway's listening socket: a shared port (SO_REUSEPORT) and a header deadline.

aiohttp has no timeout for reading a request's head: a client may open a
connection and trickle header bytes forever (slowloris). ``HeaderDeadline``
wraps aiohttp's protocol and aborts a connection whose first request head is not
complete ``timeout`` seconds after it opened; between requests on a kept-alive
connection aiohttp's own ``keepalive_timeout`` (set to the same value) closes a
connection that is waiting for its next request.

``SO_REUSEPORT`` lets N gateway processes listen on one address; the kernel
spreads new connections across them (``agentbus up --replicas N``). Linux only
lets sockets of the same user share a port that way.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import cast

from aiohttp import web

# The end of a request head: CRLF CRLF (or bare LF LF, which parsers may accept).
HEAD_ENDS = (b"\n\r\n", b"\n\n")


class HeaderDeadline(asyncio.Protocol):
    """Delegates to aiohttp's protocol; aborts if the first head is late."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        timeout: float,
        on_expire: Callable[[], None] = lambda: None,
    ) -> None:
        self._inner = inner
        self._timeout = timeout
        self._on_expire = on_expire
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if self._timeout > 0:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._timeout, self._expire)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._timer is not None:
            seen = self._tail + data
            if any(end in seen for end in HEAD_ENDS):
                self._cancel()
            else:
                self._tail = seen[-2:]
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._tail = b""

    def _expire(self) -> None:
        self._timer = None
        if self._transport is not None and not self._transport.is_closing():
            self._on_expire()
            self._transport.abort()


def listening_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """A bound, listening, non-blocking TCP socket (IPv4 or IPv6 by ``host``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class GuardedSite(web.SockSite):
    """``SockSite`` whose connections go through :class:`HeaderDeadline`."""

    __slots__ = ("_header_timeout", "_on_expire")

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        header_timeout: float,
        on_expire: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(runner, sock, backlog=1024)
        self._header_timeout = header_timeout
        self._on_expire = on_expire

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        if server is None:
            raise RuntimeError("the runner is not set up")
        timeout, on_expire = self._header_timeout, self._on_expire
        self._server = await asyncio.get_running_loop().create_server(
            lambda: HeaderDeadline(server(), timeout, on_expire),
            sock=self._sock,
            backlog=self._backlog,
        )
