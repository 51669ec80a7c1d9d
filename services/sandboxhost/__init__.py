"""Local E2B-compatible sandbox service: control plane + envd in bubblewrap jails."""

from services.sandboxhost.host import ENVD_VERSION, SandboxHost
from services.sandboxhost.service import run
from services.sandboxhost.settings import SandboxHostSettings

__all__ = ["ENVD_VERSION", "SandboxHost", "SandboxHostSettings", "run"]
