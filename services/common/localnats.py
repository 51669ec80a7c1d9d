"""Find the NATS that ``agentbus up`` embedded, for tools on the same machine.

``agentbus up`` records the server URL next to the per-service credentials in
``<data dir>/nats/``; tools such as ``agentbus audit`` use the ``admin`` user
from there, so the tour works without copying passwords around.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

ADMIN = "admin"


class LocalNats(NamedTuple):
    """URL and the admin credential of a local ``agentbus up``."""

    url: str
    user: str
    password: str


def record_url(nats_dir: Path, url: str) -> None:
    """Written by ``agentbus up`` once its nats-server listens."""
    (nats_dir / "url").write_text(url + "\n")


def find_local_nats(data_dir: Path) -> LocalNats | None:
    """The embedded server's URL and admin credential, if ``up`` left them here."""
    nats_dir = data_dir / "nats"
    try:
        url = (nats_dir / "url").read_text().strip()
        creds = json.loads((nats_dir / "credentials.json").read_text())
    except (OSError, ValueError):
        return None
    password = creds.get(ADMIN)
    if not url or not isinstance(password, str):
        return None
    return LocalNats(url, ADMIN, password)
