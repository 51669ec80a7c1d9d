"""``BrokerSettings``: every knob of the broker, from ``AGENTBUS_*`` variables."""

from __future__ import annotations

from typing import Literal

import msgspec


class BrokerSettings(msgspec.Struct, frozen=True, kw_only=True):
    """One frozen settings object; dev defaults for all but secrets."""

    nats_url: str = "nats://127.0.0.1:4222"
    nats_user: str | None = None
    nats_password: str | None = None
    bus_prefix: str = "agentbus"
    broker_provider: Literal["local", "e2b", "ags"] = "local"
    broker_replica_id: str = ""
    sandbox_idle_pause_s: float = 600.0
    sandbox_archive_after_s: float = 86400.0
    sandbox_archive_retention_s: float = 7 * 86400.0
    sandbox_timeout_s: int = 3600
    # Empty: the provider's own default — "default" on the local sandbox host
    # (python, git, node, build tools, a language server), "base" on E2B.
    sandbox_template: str = ""
    broker_token_ttl_s: float = 900.0
    broker_resume_attempts: int = 3
    broker_resume_backoff_s: float = 0.2
    broker_op_lease_s: float = 6.0
    broker_reconcile_s: float = 60.0
    # The first pass soon after start: a sandbox left by a broker that died
    # mid-create is killed (and stops billing) now, not a whole period later.
    broker_reconcile_first_s: float = 5.0
    broker_sweep_s: float = 5.0
    broker_full_archive_every: int = 20
    broker_staging_dir: str = ""
    broker_upload_max_mb: float = 100.0
    broker_archive_max_mb: float = 2048.0
    broker_archive_store_max_mb: float = 0.0
    # Prometheus ``GET /metrics`` of the broker (sandbox seconds by state; unset: off).
    broker_metrics_port: int | None = None
    broker_metrics_host: str = "127.0.0.1"
    sandboxhost_url: str = "http://127.0.0.1:49982"
    sandboxhost_api_key: str | None = None
    e2b_api_url: str = "https://api.e2b.app"
    e2b_api_key: str | None = None
    e2b_sandbox_url: str = ""
    ags_secret_id: str | None = None
    ags_secret_key: str | None = None
    ags_region: str = "ap-guangzhou"
    ags_endpoint: str = "ags.tencentcloudapi.com"
    ags_scheme: Literal["https", "http"] = "https"
    ags_tool_name: str = "code-interpreter-v1"
    ags_domain: str = "tencentags.com"
    ags_envd_url: str = ""
    ags_poll_s: float = 0.2
