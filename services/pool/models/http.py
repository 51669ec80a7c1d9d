"""The HTTP session of a streaming model client, made on first use."""

from __future__ import annotations

import aiohttp


class LazyHttpSession:
    """One aiohttp session per client; ``read_timeout_s`` bounds a silent socket."""

    def __init__(self, read_timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=10, sock_read=read_timeout_s
        )
        self._session: aiohttp.ClientSession | None = None

    def get(self) -> aiohttp.ClientSession:
        """The open session (a new one after a close)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def close(self) -> None:
        """Close the session, if one was made."""
        if self._session is not None:
            await self._session.close()
