"""Settings of ``agentbus pool`` and its workers (``AGENTBUS_*``; dev defaults)."""

from __future__ import annotations

from typing import Literal

import msgspec

Approval = Literal["auto", "ask-exec", "ask-all"]
ModelKind = Literal["scripted", "openai", "anthropic"]
DEFAULT_MODEL_URL = "https://api.deepseek.com/v1"
# The only tool backend: every tool runs in the session's sandbox through envd.
ToolBackend = Literal["envd"]


class PoolSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Configuration of the pool and of every worker it starts."""

    nats_url: str = "nats://127.0.0.1:4222"
    nats_user: str | None = None
    nats_password: str | None = None
    bus_prefix: str = "agentbus"
    # Warm worker processes kept idle and connected.
    pool_workers: int = 2
    # T1: a worker idle this long releases its session and returns to the pool.
    pool_idle_release_s: float = 600.0
    # Lease expiry; the owning worker renews it every third of this.
    pool_lease_ttl_s: float = 10.0
    # Model calls per turn before the turn ends with ``max_steps``.
    pool_max_steps: int = 50
    # How long a wake-up may stay unacknowledged before JetStream redelivers it.
    pool_wake_ack_wait_s: float = 10.0
    # Coalescing interval of agent.*.delta events (50 ms: at most ~20 per second).
    pool_delta_interval_s: float = 0.05
    # Activity reports to the broker while a tool or model call is in flight.
    pool_activity_interval_s: float = 5.0
    # A tool call hit by a short infrastructure outage (broker or sandbox host
    # restarting) is retried this long where that is safe (reads; commands
    # that never started); then its result carries ``infrastructure_unavailable``.
    pool_tool_retry_window_s: float = 10.0
    # Seconds to wait for a worker process to import and connect.
    pool_worker_start_timeout_s: float = 30.0
    # On stop: how long running turns may go on before they end as worker_lost.
    pool_drain_s: float = 10.0
    # Snapshot a session's conversation at release once its log grew this much.
    pool_snapshot_every: int = 500
    pool_tool_backend: ToolBackend = "envd"
    pool_log_level: str = "INFO"
    # Prometheus ``GET /metrics`` of the pool and its workers (unset: off).
    pool_metrics_port: int | None = None
    pool_metrics_host: str = "127.0.0.1"
    # Where the workers write their counters (unset: a temporary directory).
    pool_metrics_dir: str | None = None
    approval: Approval = "ask-exec"
    model: ModelKind = "scripted"
    # With model=anthropic, this default stands for https://api.anthropic.com.
    model_base_url: str = DEFAULT_MODEL_URL
    # A secret: never logged, never sent to a sandbox.
    model_api_key: str | None = None
    model_name: str = "deepseek-chat"
    model_timeout_s: float = 120.0
    # A streamed response with no event for this long is broken (and retried).
    model_stall_timeout_s: float = 60.0
    model_max_retries: int = 4
    model_retry_base_s: float = 0.5
    model_max_tokens: int | None = None
    # Anthropic: extended thinking budget in tokens (0 = off); prompt caching.
    model_thinking_budget: int = 0
    model_prompt_cache: bool = True
    # Ordered fallbacks, comma-separated ``kind:name[@base_url]``; after
    # ``model_fallback_after`` consecutive failed attempts the turn goes on on
    # the next. Their key: ``model_fallback_api_key``, else ``model_api_key``.
    model_fallbacks: str = ""
    model_fallback_after: int = 3
    # A secret: never logged, never sent to a sandbox.
    model_fallback_api_key: str | None = None
    # Scripted model: pause between streamed words (0 = as fast as possible).
    scripted_token_delay_s: float = 0.0
