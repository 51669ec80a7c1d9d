"""The embedded nats-server's configuration: per-service users and permissions.

Every service connects with its own generated password; the sandbox host has no
NATS user at all. So code inside a sandbox, even with host networking, holds no
credential to connect with (design §6).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

SERVICES = ("gateway", "pool", "broker", "projector", "notifier", "admin")

# Subjects each role must never publish to (its neighbours' commands).
DENY_PUBLISH: dict[str, list[str]] = {
    "gateway": ["{p}.broker.bind", "{p}.broker.ctl.>"],
    "pool": ["{p}.broker.files.>", "{p}.projector.>"],
    "broker": ["{p}.projector.>"],
    "projector": ["{p}.broker.>"],
    "notifier": ["{p}.broker.>", "{p}.projector.>"],
    "admin": [],
}


def load_credentials(nats_dir: Path) -> dict[str, str]:
    """Per-service passwords, generated once into a 0600 file."""
    path = nats_dir / "credentials.json"
    if path.exists():
        creds: dict[str, str] = json.loads(path.read_text())
        if set(creds) >= set(SERVICES):
            return creds
    creds = {name: secrets.token_urlsafe(24) for name in SERVICES}
    nats_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(creds, f)
    return creds


def render_config(creds: dict[str, str], prefix: str = "agentbus") -> str:
    """nats-server config text with one user per service."""
    users = []
    for name, password in creds.items():
        deny = ", ".join(json.dumps(s.format(p=prefix)) for s in DENY_PUBLISH[name])
        users.append(
            f'    {{ user: "{name}", password: {json.dumps(password)}, '
            f'permissions: {{ publish: {{ allow: ">", deny: [{deny}] }}, '
            f'subscribe: {{ allow: ">" }} }} }}'
        )
    return "authorization {\n  users: [\n" + ",\n".join(users) + "\n  ]\n}\n"


def write_config(
    nats_dir: Path, creds: dict[str, str], prefix: str = "agentbus"
) -> Path:
    """Write the config (0600: it holds passwords) and return its path."""
    path = nats_dir / "nats.conf"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(render_config(creds, prefix))
    return path
