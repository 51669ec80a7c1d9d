"""Errors raised by the envd client and the tool adapter (one base: EnvdError)."""

from __future__ import annotations


class EnvdError(Exception):
    """Base error of the envd package; ``op`` names the call, ``code`` the cause."""

    def __init__(self, op: str, code: str, detail: str) -> None:
        self.op = op
        self.code = code
        self.detail = detail
        super().__init__(f"{op}: {code}: {detail}")


class EnvdNotFound(EnvdError):
    """The path, process or sandbox does not exist."""

    def __init__(self, op: str, detail: str) -> None:
        super().__init__(op, "not_found", detail)


class EnvdAuthError(EnvdError):
    """The access token or user was refused (HTTP 401 / ``unauthenticated``)."""

    def __init__(self, op: str, detail: str) -> None:
        super().__init__(op, "unauthenticated", detail)


class EnvdTimeout(EnvdError):
    """A request did not complete within its deadline."""

    def __init__(self, op: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        super().__init__(op, "deadline_exceeded", f"no answer within {timeout_s:g} s")


class EnvdUnavailable(EnvdError):
    """The sandbox could not be reached (connection refused, reset, 502/503)."""

    def __init__(self, op: str, detail: str) -> None:
        super().__init__(op, "unavailable", detail)


class EnvdInvalidArgument(EnvdError):
    """envd refused the request's arguments (bad cwd, path is a directory …)."""

    def __init__(self, op: str, detail: str) -> None:
        super().__init__(op, "invalid_argument", detail)


class EnvdAlreadyExists(EnvdError):
    """The target already exists (``make_dir`` of an existing directory)."""

    def __init__(self, op: str, detail: str) -> None:
        super().__init__(op, "already_exists", detail)


class EnvdProtocolError(EnvdError):
    """The server answered something that is not valid Connect JSON."""

    def __init__(self, op: str, detail: str) -> None:
        super().__init__(op, "protocol", detail)


class PathRefused(EnvdError):
    """A tool path leaves the workspace (lexically, or through any symlink).

    Its code is ``path_outside_workspace``, as in the gateway's and broker's
    file APIs.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__("resolve", "path_outside_workspace", f"{path!r}: {reason}")


class StaleFileError(EnvdError):
    """An edit was refused because the file changed since this adapter read it."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            "edit",
            "stale_file",
            f"{path} changed since it was last read; read it again before editing",
        )


class EditMismatch(EnvdError):
    """``old`` text of an edit was not found exactly once."""

    def __init__(self, path: str, count: int) -> None:
        self.path = path
        self.count = count
        what = "not found" if count == 0 else f"found {count} times (must be unique)"
        super().__init__("edit", "edit_mismatch", f"old text {what} in {path}")


def error_for(op: str, code: str, detail: str) -> EnvdError:
    """Build the most specific error for a Connect code."""
    match code:
        case "not_found":
            return EnvdNotFound(op, detail)
        case "unauthenticated":
            return EnvdAuthError(op, detail)
        case "unavailable":
            return EnvdUnavailable(op, detail)
        case "invalid_argument" | "failed_precondition" | "out_of_range":
            return EnvdInvalidArgument(op, detail)
        case "already_exists":
            return EnvdAlreadyExists(op, detail)
        case _:
            return EnvdError(op, code, detail)


HTTP_TO_CODE = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "already_exists",
    413: "resource_exhausted",
    429: "resource_exhausted",
    499: "canceled",
    500: "internal",
    501: "unimplemented",
    502: "unavailable",
    503: "unavailable",
    504: "deadline_exceeded",
    505: "unimplemented",
    507: "resource_exhausted",
}
