"""Errors of the pool, its workers, the agent loop and the model clients."""

from __future__ import annotations


class PoolError(Exception):
    """Base of every error raised by ``services.pool``."""


class LeaseLostError(PoolError):
    """Another owner took the session's lease (the revision moved under us)."""

    def __init__(self, session_id: str, revision: int) -> None:
        self.session_id = session_id
        self.revision = revision
        super().__init__(f"lease of {session_id} lost at revision {revision}")


class ParkedError(PoolError):
    """Internal: the turn waits for a person; the worker lets the session go.

    The turn stays open in the log; the answer's ``permission.resolved`` wakes
    the session and whichever worker takes it goes on from there.
    """

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        super().__init__(f"parked waiting for {request_id}")


class WorkerStartError(PoolError):
    """A worker process exited or stayed silent before it was ready."""

    def __init__(self, worker_id: str, detail: str) -> None:
        self.worker_id = worker_id
        self.detail = detail
        super().__init__(f"worker {worker_id} did not start: {detail}")


class ModelError(PoolError):
    """The model call failed for good (after retries, or not retryable)."""

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        self.code = code
        self.status = status
        self.message = message
        super().__init__(f"{code}: {message}")


class ScriptError(PoolError):
    """A scripted prompt's ``{"script": [...]}`` is malformed."""

    def __init__(self, index: int | None, detail: str) -> None:
        self.index = index
        self.detail = detail
        where = "script" if index is None else f"script[{index}]"
        super().__init__(f"{where}: {detail}")


class SandboxUnavailableError(PoolError):
    """The broker refused the bind or did not answer."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")
