"""The identity nonce: planted in each sandbox, read back after create/resume/bind."""

from __future__ import annotations

import hmac

import aiohttp

from services.broker.errors import IdentityMismatchError
from services.envd import EnvdClient, EnvdNotFound

# Outside /workspace so archives never carry one sandbox's nonce into another.
IDENTITY_PATH = "/home/user/.agentbus/identity"


def envd_for(
    http: aiohttp.ClientSession, url: str, sandbox_id: str, token: str | None
) -> EnvdClient:
    """An envd client sharing the broker's HTTP session."""
    return EnvdClient(url, sandbox_id, token, session=http)


async def plant(envd: EnvdClient, nonce: str) -> None:
    """Write the nonce into the sandbox."""
    await envd.write_bytes(IDENTITY_PATH, nonce.encode())


async def verify(envd: EnvdClient, session_id: str, nonce: str) -> None:
    """Raise :class:`IdentityMismatchError` unless the sandbox carries ``nonce``."""
    try:
        found = await envd.read_bytes(IDENTITY_PATH)
    except EnvdNotFound as exc:
        # No nonce at all: not a sandbox this broker set up.
        raise IdentityMismatchError(session_id, envd.sandbox_id) from exc
    if not hmac.compare_digest(found.strip(), nonce.encode()):
        raise IdentityMismatchError(session_id, envd.sandbox_id)
