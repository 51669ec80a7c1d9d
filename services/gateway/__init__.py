"""The App API: device auth, sessions, prompts, SSE bridge, file API.

Entry: ``services.gateway.__main__`` (``main(argv)``, ``run(settings, stop)``).
Kept import-light: ``agentbus token`` loads only ``tokens``.
"""

from services.gateway.settings import GatewaySettings

__all__ = ["GatewaySettings"]
