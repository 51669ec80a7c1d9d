"""The broker: per-session sandbox lifecycle, providers, scoped tokens, archives."""

from services.broker.client import bind, report_activity
from services.broker.errors import BindRefusedError, SandboxError

__all__ = ["BindRefusedError", "SandboxError", "bind", "report_activity"]
