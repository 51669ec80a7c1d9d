"""One interface every sandbox provider implements (one conformance suite)."""

from __future__ import annotations

from typing import Literal, Protocol

import msgspec

ProviderState = Literal["running", "paused", "transitional", "failed"]


class SandboxInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What the provider says a sandbox really is."""

    sandbox_id: str
    state: ProviderState
    metadata: dict[str, str] = {}


class Connection(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach a running sandbox's envd, and with which token."""

    sandbox_id: str
    envd_url: str
    access_token: str | None
    token_expires_at: float = 0.0
    resumed: bool = False


def token_margin_s(grant_ttl_s: float) -> float:
    """How much longer a provider token we ask for lives than the grants we hand out.

    A worker re-binding right at its grant's expiry still finds its token valid.
    """
    return min(30.0, grant_ttl_s / 10)


class Provider(Protocol):
    """Create, connect (resuming if paused), describe, pause, kill, list."""

    name: str

    async def create(
        self, metadata: dict[str, str], idempotency_key: str
    ) -> Connection:
        """Start a sandbox; the same key twice must not start two."""
        ...

    async def connect(self, sandbox_id: str) -> Connection:
        """Reach a sandbox, resuming it if paused; a fresh token each resume."""
        ...

    async def describe(self, sandbox_id: str) -> SandboxInfo | None:
        """The sandbox's real state, or None if the provider has no such sandbox."""
        ...

    async def pause(self, sandbox_id: str) -> None:
        """Pause (memory kept where the provider can); settled when it returns."""
        ...

    async def kill(self, sandbox_id: str) -> bool:
        """Delete the sandbox; False if it did not exist."""
        ...

    async def list(self) -> list[SandboxInfo]:
        """Every sandbox this provider account holds (for the reconciler)."""
        ...

    async def close(self) -> None:
        """Release HTTP sessions."""
        ...
