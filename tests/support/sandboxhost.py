"""Reaching a real sandbox host from tests: e2b SDK options, raw control requests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tests.plugins.sandboxhost import SandboxHostProcess


def opts(host: SandboxHostProcess) -> dict[str, Any]:
    """e2b SDK keyword arguments that target ``host``."""
    return {"api_key": host.api_key, "api_url": host.url, "sandbox_url": host.url}


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
