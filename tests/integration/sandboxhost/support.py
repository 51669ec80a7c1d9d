"""Helpers for the sandbox host's integration tests (real host, real e2b SDK)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from tests.plugins.sandboxhost import SandboxHostProcess


def opts(host: SandboxHostProcess) -> dict[str, Any]:
    """e2b SDK keyword arguments that target ``host``."""
    return {"api_key": host.api_key, "api_url": host.url, "sandbox_url": host.url}


async def until(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll a (sync or async) condition until it is truthy; return its value."""
    async with asyncio.timeout(timeout):
        while True:
            value = predicate()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
            await asyncio.sleep(0.02)


def control(
    host: SandboxHostProcess, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    """A raw control-plane request: (status, JSON body or None)."""
    req = urllib.request.Request(
        host.url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"X-API-KEY": host.api_key, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        with exc:
            raw = exc.read()
        return exc.code, json.loads(raw) if raw else None
