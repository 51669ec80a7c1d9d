"""Settings of ``agentbus gateway`` (``AGENTBUS_*``; dev defaults but the secret)."""

from __future__ import annotations

import msgspec

from eventstore.settings import EventStoreSettings


class GatewaySettings(msgspec.Struct, frozen=True, kw_only=True):
    """Configuration of the App API gateway."""

    nats_url: str = "nats://127.0.0.1:4222"
    nats_user: str | None = None
    nats_password: str | None = None
    bus_prefix: str = "agentbus"
    gateway_listen: str = "127.0.0.1:8080"
    data_dir: str = ".agentbus"
    # Empty: read <data dir>/device_secret (created on first start).
    device_secret: str | None = None
    # SSE heartbeat; mobile networks and proxies drop silent streams after ~30 s.
    gateway_ping_s: float = 15.0
    gateway_retry_ms: int = 2000
    # Per-device token bucket over every authenticated request.
    gateway_rate_per_s: float = 20.0
    gateway_rate_burst: int = 60
    gateway_max_prompt_bytes: int = 65536
    # Per-device caps (429 too_many_*; 0 = off): open sessions, live sandboxes
    # (creating/running/resuming), concurrent event streams over all gateways.
    gateway_max_sessions: int = 256
    gateway_max_sandboxes: int = 32
    gateway_max_streams: int = 64
    # Accept webhook receivers on loopback / private addresses (else 422).
    webhook_allow_private: bool = False
    # Events queued for one SSE client before it is disconnected (it resumes by cursor).
    gateway_client_buffer: int = 1024
    # Unsent bytes a live client may have in the gateway before it is cut off.
    gateway_client_buffer_bytes: int = 1 << 20
    # Events per read() page when replaying (memory per replaying client).
    gateway_replay_page: int = 5000
    # Session summaries kept in the fold cache (a cache: the log is the truth).
    gateway_summary_cache: int = 4096
    # How long a prompt's client_msg_id is remembered (past JetStream's dedupe window).
    gateway_idempotency_ttl_s: float = 7 * 24 * 3600.0
    # How long an append may retry through a NATS outage before answering 503.
    gateway_append_deadline_s: float = 10.0
    # Lifetime of a stream ticket (?ticket= for EventSource) until its one use; ≤ 60.
    gateway_ticket_ttl_s: float = 60.0
    # Comma-separated origins allowed to call the API from a browser ("*": any).
    gateway_cors_origins: str = ""
    gateway_log_level: str = "INFO"
    # A connection must deliver a whole request head this many seconds after it
    # opens (or after its previous response) or it is dropped (slowloris); 0 = off.
    gateway_header_timeout_s: float = 10.0
    # SO_REUSEPORT on the listener: N gateways (same user) share one address.
    # Off by default: any process of the same uid on the host's network could
    # then join the port group and receive a share of the connections.
    gateway_reuse_port: bool = False
    # The log stream's limits are the event store's (same variables, same defaults):
    # the gateway declares the stream, and starting one must never rewrite them.
    log_max_age_s: float = 0.0
    log_max_bytes: int = -1
    log_max_msgs: int = -1
    log_duplicate_window_s: float = 120.0

    def log_stream(self) -> EventStoreSettings:
        """The event-store settings ``ensure_log_stream`` declares the log with."""
        return EventStoreSettings(
            nats_url=self.nats_url,
            bus_prefix=self.bus_prefix,
            log_max_age_s=self.log_max_age_s,
            log_max_bytes=self.log_max_bytes,
            log_max_msgs=self.log_max_msgs,
            log_duplicate_window_s=self.log_duplicate_window_s,
        )
