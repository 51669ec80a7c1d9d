"""Sandbox providers behind one interface: ``local``, ``e2b``, ``ags``."""

from __future__ import annotations

from services.broker.providers.base import (
    Connection,
    Provider,
    SandboxInfo,
    token_margin_s,
)
from services.broker.providers.e2b import E2bProvider
from services.broker.settings import BrokerSettings

__all__ = ["Connection", "E2bProvider", "Provider", "SandboxInfo", "make_provider"]


def make_provider(settings: BrokerSettings) -> Provider:
    """The provider the settings name."""
    s = settings
    if s.broker_provider == "local":
        return E2bProvider(
            "local",
            s.sandboxhost_url,
            s.sandboxhost_api_key,
            sandbox_url=s.sandboxhost_url,
            template=s.sandbox_template or "default",
            timeout_s=s.sandbox_timeout_s,
            token_ttl_s=s.broker_token_ttl_s + token_margin_s(s.broker_token_ttl_s),
        )
    if s.broker_provider == "e2b":
        return E2bProvider(
            "e2b",
            s.e2b_api_url,
            s.e2b_api_key,
            sandbox_url=s.e2b_sandbox_url,
            template=s.sandbox_template or "base",
            timeout_s=s.sandbox_timeout_s,
            # E2B cloud has no token lifetimes: its tokens live as long as the
            # sandbox and rotate on resume (docs/architecture.md §9).
        )
    from services.broker.providers.ags import AgsProvider

    return AgsProvider.from_settings(s)
