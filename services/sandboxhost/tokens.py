"""Envd access tokens: optional lifetimes and rotation (agentbus extension headers).

Plain E2B clients never send these headers, and their tokens never expire (E2B
semantics). The broker sends them to get short-lived tokens it can rotate.
"""

from __future__ import annotations

import hmac
import math
import secrets

import msgspec
from aiohttp import web

from services.sandboxhost.errors import ControlError
from services.sandboxhost.records import HostSandboxRecord

TTL_HEADER = "X-Agentbus-Token-Ttl"
ROTATE_HEADER = "X-Agentbus-Rotate-Token"
GRACE_HEADER = "X-Agentbus-Token-Grace"
DEFAULT_GRACE_S = 10.0
MAX_GRACE_S = 300.0


class TokenRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a control-plane call asked of the envd token it answers with."""

    ttl_s: float | None = None
    rotate: bool = False
    grace_s: float = DEFAULT_GRACE_S


def _seconds(request: web.Request, name: str) -> float | None:
    raw = request.headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError as exc:
        raise ControlError(400, f"{name}: expected seconds, got {raw!r}") from exc
    if not math.isfinite(value) or value < 0:
        raise ControlError(400, f"{name}: must be a non-negative number")
    return value


def token_request(request: web.Request) -> TokenRequest:
    """The agentbus token headers of a request (none → plain E2B behaviour)."""
    ttl = _seconds(request, TTL_HEADER)
    grace = _seconds(request, GRACE_HEADER)
    rotate = request.headers.get(ROTATE_HEADER, "").strip().lower()
    return TokenRequest(
        ttl_s=ttl or None,
        rotate=rotate in ("1", "true", "yes"),
        grace_s=DEFAULT_GRACE_S if grace is None else min(grace, MAX_GRACE_S),
    )


def issue(
    rec: HostSandboxRecord, ttl_s: float | None, now: float, grace_s: float
) -> None:
    """Give the sandbox a new token; the old one lives on for ``grace_s`` at most."""
    old_until = rec.envd_token_expires_at
    keep_until = now + grace_s
    if old_until is not None:
        keep_until = min(keep_until, old_until)
    if grace_s > 0 and keep_until > now:
        rec.previous_envd_token = rec.envd_access_token
        rec.previous_envd_token_until = keep_until
    else:
        rec.previous_envd_token = None
        rec.previous_envd_token_until = 0.0
    rec.envd_access_token = secrets.token_hex(32)
    rec.envd_token_expires_at = now + ttl_s if ttl_s else None


def current_valid(rec: HostSandboxRecord, now: float) -> bool:
    """Whether the sandbox's current token has not expired."""
    return rec.envd_token_expires_at is None or now < rec.envd_token_expires_at


def same_secret(given: str, secret: str) -> bool:
    """Constant-time equality that never raises on a header's non-ASCII bytes.

    aiohttp decodes header values with ``surrogateescape``; ``compare_digest``
    refuses non-ASCII ``str`` and ``.encode()`` refuses surrogates, so both are
    compared as the raw bytes the client sent.
    """
    raw = given.encode("utf-8", "surrogateescape")
    return hmac.compare_digest(raw, secret.encode())


def accepts(rec: HostSandboxRecord, token: str, now: float) -> bool:
    """Whether envd takes ``token`` for this sandbox right now."""
    if same_secret(token, rec.envd_access_token):
        return current_valid(rec, now)
    prev = rec.previous_envd_token
    return (
        prev is not None
        and now < rec.previous_envd_token_until
        and same_secret(token, prev)
    )
