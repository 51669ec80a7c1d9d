"""Device tokens: ``v1.<device>.<expires>.<hmac>``, signed with the gateway secret.

A token names one device and expires; the check is constant-time. The secret
comes from ``AGENTBUS_DEVICE_SECRET`` or a 0600 file in the data dir.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import time
from pathlib import Path

DEVICE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_TTL_S = 24 * 3600
SECRET_FILE = "device_secret"  # noqa: S105 - a file name, not a secret


class TokenError(Exception):
    """A token is missing, malformed, forged or expired."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def load_secret(data_dir: Path, configured: str | None) -> bytes:
    """The configured secret, else the data dir's, created on first use."""
    if configured:
        return configured.encode()
    path = data_dir / SECRET_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip().encode()


def _sign(secret: bytes, body: str) -> str:
    mac = hmac.new(secret, body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def issue(
    secret: bytes, device_id: str, ttl_s: int = DEFAULT_TTL_S, now: float | None = None
) -> str:
    """A token for ``device_id`` valid for ``ttl_s`` seconds."""
    if not DEVICE_ID.match(device_id):
        raise TokenError("device id must be 1-64 of [A-Za-z0-9_-]")
    expires = int((now if now is not None else time.time()) + ttl_s)
    body = f"v1.{device_id}.{expires}"
    return f"{body}.{_sign(secret, body)}"


def verify(secret: bytes, token: str, now: float | None = None) -> str:
    """The device id a valid token names; raises TokenError otherwise."""
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != "v1":
        raise TokenError("malformed token")
    _, device_id, expires, signature = parts
    expected = _sign(secret, f"v1.{device_id}.{expires}")
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise TokenError("bad signature")
    if not expires.isdigit() or int(expires) < (
        now if now is not None else time.time()
    ):
        raise TokenError("token expired")
    if not DEVICE_ID.match(device_id):
        raise TokenError("malformed token")
    return device_id
