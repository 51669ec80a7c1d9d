"""Settings of the event store and the projector process."""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

REPLICAS_VAR = "AGENTBUS_JS_REPLICAS"


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
    projector_db: str = ".agentbus/projection.db"
    projector_batch: int = 256
    # TTL of the copier lease among projector replicas (one copies, others stand by).
    projector_lease_s: float = 6.0


class ReplicaSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Replicas of every stream, KV bucket and object store (3 on a 3-node cluster).

    Its own Struct, read where a declaration happens (:func:`js_replicas`), so
    every service applies the one setting without a copy in its own settings.
    """

    js_replicas: int = 1


def js_replicas(environ: Mapping[str, str] | None = None) -> int:
    """``AGENTBUS_JS_REPLICAS`` (1-5), or :class:`ValueError` naming the variable."""
    raw = (os.environ if environ is None else environ).get(REPLICAS_VAR, "1")
    try:
        value = msgspec.convert(
            {"js_replicas": raw}, ReplicaSettings, strict=False
        ).js_replicas
    except msgspec.ValidationError:
        value = 0
    if not 1 <= value <= 5:
        raise ValueError(f"{REPLICAS_VAR}: expected an integer 1-5, got {raw!r}")
    return value
