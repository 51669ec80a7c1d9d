"""Settings of the launcher (``agentbus up``)."""

from __future__ import annotations

import msgspec


class LauncherSettings(msgspec.Struct, frozen=True, kw_only=True):
    """``AGENTBUS_*`` variables the launcher itself reads (flags override them)."""

    data_dir: str = ".agentbus"
    http: str = "127.0.0.1:8080"
    nats_url: str | None = None
    nats_port: int = 4222
    # Embedded NATS nodes: 1, or 3 for a JetStream cluster (3 replicas everywhere).
    nats_cluster: int = 1
    # Processes of each of gateway, pool, broker and projector.
    replicas: int = 1
    sandboxhost_listen: str = "127.0.0.1:49982"
    approval: str = "ask-exec"
    pool_workers: int = 2
    # Restart back-off for a crashed service: doubles up to the max.
    restart_backoff_s: float = 0.5
    restart_backoff_max_s: float = 30.0
    # A child that ran this long before crashing restarts after restart_backoff_s again.
    restart_healthy_s: float = 30.0
