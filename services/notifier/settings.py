"""Settings of ``agentbus notifier`` (``AGENTBUS_*``)."""

from __future__ import annotations

import msgspec


class NotifierSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Configuration of the webhook notifier."""

    nats_url: str = "nats://127.0.0.1:4222"
    nats_user: str | None = None
    nats_password: str | None = None
    bus_prefix: str = "agentbus"
    # Deliver to receivers on loopback / private addresses (refused by default).
    webhook_allow_private: bool = False
    # One attempt's HTTP timeout (connect + answer).
    webhook_timeout_s: float = 10.0
    # Attempts per event before it is recorded as failed.
    webhook_max_attempts: int = 8
    # Back-off between attempts: base * 2^(attempt-1), at most max.
    webhook_retry_base_s: float = 2.0
    webhook_retry_max_s: float = 600.0
    # Deliveries in flight per notifier process.
    notifier_concurrency: int = 64
    # How long the outbox keeps an undelivered job.
    notifier_outbox_max_age_s: float = 3 * 24 * 3600.0
    notifier_log_level: str = "INFO"
