"""Settings that point each provider at the local sandbox host (or the fake API)."""

from __future__ import annotations

from typing import Any

import msgspec

from services.broker.settings import BrokerSettings

SECRET_ID = "AKIDfake0123456789"
SECRET_KEY = "fake-secret-key-0123456789"


def settings(kind: str, host: Any, endpoint: str = "", **over: Any) -> BrokerSettings:
    """Broker settings that point ``kind`` at the local sandbox host (or fake)."""
    raw: dict[str, Any] = {
        "broker_provider": kind,
        "sandboxhost_url": host.url,
        "sandboxhost_api_key": host.api_key,
        "e2b_api_url": host.url,
        "e2b_api_key": host.api_key,
        "e2b_sandbox_url": host.url,
        "ags_secret_id": SECRET_ID,
        "ags_secret_key": SECRET_KEY,
        "ags_endpoint": endpoint,
        "ags_scheme": "http",
        "ags_envd_url": host.url,
        "ags_tool_name": "base",
        "ags_poll_s": 0.02,
        "sandbox_timeout_s": 600,
    }
    raw.update(over)
    return msgspec.convert(raw, BrokerSettings)
