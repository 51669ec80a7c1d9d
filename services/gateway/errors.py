"""Errors of the gateway; each becomes one api.md error answer at the HTTP edge."""

from __future__ import annotations

from schemas.api import ErrorBody, ErrorDetail


class GatewayError(Exception):
    """Base of every gateway error: an HTTP status and an api.md error body."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}
        super().__init__(f"{status} {code}: {message}")

    def body(self) -> ErrorBody:
        """The JSON body of the answer."""
        return ErrorBody(
            error=ErrorDetail(code=self.code, message=self.message, field=self.field)
        )


class SessionNotFoundError(GatewayError):
    """No such session for this device: identical for missing and foreign sessions."""

    def __init__(self) -> None:
        super().__init__(404, "session_not_found", "no such session")


class UnauthorizedError(GatewayError):
    """Missing or bad token; the body never says which."""

    def __init__(self) -> None:
        super().__init__(
            401,
            "unauthorized",
            "a valid device token is required",
            headers={"WWW-Authenticate": 'Bearer realm="agentbus"'},
        )


class RateLimitedError(GatewayError):
    """The device sent more requests than its budget allows."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(
            429,
            "rate_limited",
            "too many requests for this device",
            headers={"Retry-After": str(retry_after_s)},
        )


class ConflictError(GatewayError):
    """The session's state does not allow the command (409)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(409, code, message)


class InvalidRequestError(GatewayError):
    """Well-formed but invalid input (422 with the field at fault)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(422, "invalid_request", message, field=field)


class MalformedRequestError(GatewayError):
    """The body is not JSON (400)."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "malformed_json", message)


class MalformedHeaderError(GatewayError):
    """A header value that is not ASCII (400, ``field`` = the header's name)."""

    def __init__(self, header: str) -> None:
        super().__init__(
            400, "malformed_header", f"{header} must be ASCII", field=header
        )


class TooLargeError(GatewayError):
    """The body or one of its fields is over a configured limit (413)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(413, "too_large", message, field=field)


class UnavailableError(GatewayError):
    """A dependency (NATS / JetStream) does not answer (503 with Retry-After)."""

    def __init__(self, message: str = "the event bus is unavailable") -> None:
        super().__init__(503, "unavailable", message, headers={"Retry-After": "1"})
