"""The envd client (workers, broker, gateway) and the agent's sandbox tools."""

from services.envd.client import EnvdClient
from services.envd.errors import (
    EditMismatch,
    EnvdAlreadyExists,
    EnvdAuthError,
    EnvdError,
    EnvdInvalidArgument,
    EnvdNotFound,
    EnvdProtocolError,
    EnvdTimeout,
    EnvdUnavailable,
    PathRefused,
    StaleFileError,
)
from services.envd.output import (
    ExecResult,
    OnText,
    OutputChunk,
    TextFeed,
    Utf8Stream,
)
from services.envd.paths import PathCache, Resolved, WorkspacePaths
from services.envd.sandbox_tools import (
    CommandOutput,
    EditResult,
    GlobResult,
    LsEntry,
    LsResult,
    ReadResult,
    SandboxTools,
    WriteResult,
)
from services.envd.wire import EntryInfo

__all__ = [
    "CommandOutput",
    "EditMismatch",
    "EditResult",
    "EntryInfo",
    "EnvdAlreadyExists",
    "EnvdAuthError",
    "EnvdClient",
    "EnvdError",
    "EnvdInvalidArgument",
    "EnvdNotFound",
    "EnvdProtocolError",
    "EnvdTimeout",
    "EnvdUnavailable",
    "ExecResult",
    "GlobResult",
    "LsEntry",
    "LsResult",
    "OnText",
    "OutputChunk",
    "PathCache",
    "PathRefused",
    "ReadResult",
    "Resolved",
    "SandboxTools",
    "StaleFileError",
    "TextFeed",
    "Utf8Stream",
    "WorkspacePaths",
    "WriteResult",
]
