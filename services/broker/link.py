"""``SandboxLink``: a sandbox's envd URL, id and token; streamed file I/O."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import IO

import aiohttp
import msgspec

from services.envd import EnvdClient
from services.envd.wire import http_error

STREAM_CHUNK = 256 * 1024


class SandboxLink(msgspec.Struct, frozen=True):
    """One sandbox's envd base URL, id and access token."""

    url: str
    sandbox_id: str
    token: str | None

    def envd(self, http: aiohttp.ClientSession) -> EnvdClient:
        """An envd client on the shared HTTP session."""
        return EnvdClient(self.url, self.sandbox_id, self.token, session=http)

    def headers(self) -> dict[str, str]:
        """Routing and auth headers of envd's ``/files``."""
        h = {"E2b-Sandbox-Id": self.sandbox_id, "E2b-Sandbox-Port": "49983"}
        if self.token:
            h["X-Access-Token"] = self.token
        return h

    async def download(
        self, http: aiohttp.ClientSession, path: str, sink: IO[bytes]
    ) -> int:
        """Stream a sandbox file into ``sink`` in bounded chunks; returns its size."""
        params = {"path": path, "username": "user"}
        headers = {**self.headers(), "Accept-Encoding": "identity"}
        async with http.get(self.url + "/files", params=params, headers=headers) as r:
            if r.status != 200:
                raise http_error(f"read {path}", r.status, await r.read())
            size = 0
            async for chunk in r.content.iter_chunked(STREAM_CHUNK):
                sink.write(chunk)
                size += len(chunk)
            return size

    async def upload(
        self, http: aiohttp.ClientSession, path: str, source: IO[bytes]
    ) -> None:
        """Stream ``source`` into a sandbox file (parents created)."""
        params = {"path": path, "username": "user"}
        headers = {**self.headers(), "Content-Type": "application/octet-stream"}
        async with http.post(
            self.url + "/files", params=params, headers=headers, data=_chunks(source)
        ) as r:
            body = await r.read()
            if r.status != 200:
                raise http_error(f"write {path}", r.status, body)


async def _chunks(source: IO[bytes]) -> AsyncIterator[bytes]:
    while True:
        chunk = source.read(STREAM_CHUNK)
        if not chunk:
            return
        yield chunk
