"""Settings of the event store and the projector process."""

from __future__ import annotations

import msgspec


class EventStoreSettings(msgspec.Struct, frozen=True, kw_only=True):
    """``AGENTBUS_*`` variables read by the log and the projector."""

    nats_url: str = "nats://127.0.0.1:4222"
    nats_user: str | None = None
    nats_password: str | None = None
    bus_prefix: str = "agentbus"
    # JetStream retention of the session logs; 0 = unlimited (the projector keeps all).
    log_max_age_s: float = 0.0
    log_max_bytes: int = -1
    log_max_msgs: int = -1
    # Nats-Msg-Id dedupe window (retries with the same event id inside it are no-ops).
    log_duplicate_window_s: float = 120.0
    log_replicas: int = 1
    projector_db: str = ".agentbus/projection.db"
    projector_batch: int = 256
    # TTL of the copier lease among projector replicas (one copies, others stand by).
    projector_lease_s: float = 6.0
