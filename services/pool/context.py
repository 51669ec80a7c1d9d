"""What a worker process holds while it lives: connections, model, identity."""

from __future__ import annotations

from dataclasses import dataclass

from nats.aio.client import Client
from nats.js import JetStreamContext

from eventstore.log import JetStreamLog
from schemas.names import BusNames
from services.pool.lease import LeaseStore
from services.pool.models.base import ModelClient
from services.pool.settings import PoolSettings
from services.pool.snapshot import SnapshotStore


@dataclass(frozen=True)
class WorkerContext:
    """Shared by every session this worker serves, one after another."""

    settings: PoolSettings
    names: BusNames
    nc: Client
    js: JetStreamContext
    log: JetStreamLog
    leases: LeaseStore
    snapshots: SnapshotStore
    model: ModelClient
    worker_id: str
    host: str
    pid: int

    @property
    def actor(self) -> str:
        """The actor of this worker's events."""
        return f"worker:{self.worker_id}"
