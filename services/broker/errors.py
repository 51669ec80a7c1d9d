"""The broker's errors: one base, structured attributes."""

from __future__ import annotations


class SandboxError(Exception):
    """Base of every broker failure."""


class BindRefusedError(SandboxError):
    """The broker refused a bind (``code`` as in ``BindRefused``)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class ProviderError(SandboxError):
    """A provider call failed (``transient`` ones are worth retrying)."""

    def __init__(
        self, provider: str, op: str, detail: str, *, transient: bool = True
    ) -> None:
        self.provider = provider
        self.op = op
        self.detail = detail
        self.transient = transient
        super().__init__(f"{provider} {op}: {detail}")


class SandboxNotFoundError(ProviderError):
    """The provider has no such sandbox (deleted, expired, never existed)."""

    def __init__(self, provider: str, op: str, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id
        super().__init__(
            provider, op, f"sandbox {sandbox_id} not found", transient=False
        )


class IdentityMismatchError(SandboxError):
    """The nonce read back from a sandbox is not the one planted there."""

    def __init__(self, session_id: str, sandbox_id: str) -> None:
        self.session_id = session_id
        self.sandbox_id = sandbox_id
        super().__init__(
            f"sandbox {sandbox_id} does not carry session {session_id}'s nonce"
        )


class FileApiError(SandboxError):
    """A file API request failed with a docs/api.md error code and HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        self.code = code
        self.message = message
        self.status = status
        super().__init__(f"{code}: {message}")
