"""Messages between the pool and its worker processes, one JSON line each.

They travel over the worker's stdin/stdout pipes only: the one-time bind token
never crosses NATS or an environment a sandbox could see.
"""

from __future__ import annotations

import msgspec

from services.pool.lease import Lease
from services.pool.settings import PoolSettings


class WorkerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """First line to a new worker: who it is and how to connect."""

    worker_id: str
    host: str
    settings: PoolSettings


class Assign(msgspec.Struct, frozen=True, kw_only=True, tag="assign"):
    """Serve this session; the lease is held for you at ``revision``."""

    lease: Lease
    revision: int
    token: str


class Stop(msgspec.Struct, frozen=True, kw_only=True, tag="stop"):
    """Finish the running turn (within ``grace_s``), release, exit."""

    grace_s: float = 10.0


class Yield(msgspec.Struct, frozen=True, kw_only=True, tag="yield"):
    """Other sessions wait for a worker: release yours now if it is idle."""


class Ready(msgspec.Struct, frozen=True, kw_only=True, tag="ready"):
    """Imported, connected, idle."""

    worker_id: str
    pid: int


class Released(msgspec.Struct, frozen=True, kw_only=True, tag="released"):
    """The session is let go (idle, closed, no work, stopping).

    ``rewake_seq``: the wake stream seq of the re-wake queued at the release
    (0: none); it covers every older wake-up of the session.
    """

    session_id: str
    reason: str
    rewake_seq: int = 0


class Idle(msgspec.Struct, frozen=True, kw_only=True, tag="idle"):
    """The session has nothing to do (no turn runs, none waits): it may yield."""

    session_id: str


class Busy(msgspec.Struct, frozen=True, kw_only=True, tag="busy"):
    """A turn runs (or waits for a person): not to be yielded."""

    session_id: str


ToWorker = Assign | Stop | Yield
FromWorker = Ready | Released | Idle | Busy

_to_worker = msgspec.json.Decoder(ToWorker)
_from_worker = msgspec.json.Decoder(FromWorker)
_config = msgspec.json.Decoder(WorkerConfig)


def encode(msg: msgspec.Struct) -> bytes:
    """One line."""
    return msgspec.json.encode(msg) + b"\n"


def decode_to_worker(line: bytes) -> ToWorker:
    """A pool → worker message."""
    return _to_worker.decode(line)


def decode_from_worker(line: bytes) -> FromWorker:
    """A worker → pool message."""
    return _from_worker.decode(line)


def decode_config(line: bytes) -> WorkerConfig:
    """The first line a worker reads."""
    return _config.decode(line)
