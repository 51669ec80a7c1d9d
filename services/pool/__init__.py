"""Warm agent workers: pool, leases, wake-ups, the agent loop, models, tools."""

from services.pool.errors import (
    LeaseLostError,
    ModelError,
    PoolError,
    SandboxUnavailableError,
    ScriptError,
    WorkerStartError,
)
from services.pool.settings import PoolSettings

__all__ = [
    "LeaseLostError",
    "ModelError",
    "PoolError",
    "PoolSettings",
    "SandboxUnavailableError",
    "ScriptError",
    "WorkerStartError",
]
