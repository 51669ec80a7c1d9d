"""Errors of the sandbox host, carrying the wire code they answer with."""

from __future__ import annotations

CONNECT_STATUS = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}


class SandboxHostError(Exception):
    """Base error of the sandbox host."""


class EnvdRpcError(SandboxHostError):
    """A data-plane failure with its Connect error code (``not_found``, …)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code if code in CONNECT_STATUS else "internal"
        self.message = message
        super().__init__(f"{self.code}: {message}")

    @property
    def status(self) -> int:
        """The HTTP status a unary Connect error answers with."""
        return CONNECT_STATUS[self.code]


class ControlError(SandboxHostError):
    """A control-plane failure: HTTP status and E2B error body."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"{status}: {message}")


class JailError(SandboxHostError):
    """A sandbox could not be started (bubblewrap, cgroups, supervisor)."""

    def __init__(self, sandbox_id: str, problem: str) -> None:
        self.sandbox_id = sandbox_id
        self.problem = problem
        super().__init__(f"sandbox {sandbox_id}: {problem}")
