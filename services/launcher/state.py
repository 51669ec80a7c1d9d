"""What ``agentbus up`` is running, recorded in the data dir for ``agentbus status``.

``<data dir>/up.json`` (0600, replaced atomically on every start, exit and
restart of a child): the launcher's pid, each NATS node (name, pid, url) and
each service (name, pid, restarts).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from services.launcher.natsnodes import NatsNode
from services.launcher.supervisor import ServiceSpec

STATE_FILE = "up.json"


def state_path(data_dir: Path) -> Path:
    """Where ``up`` records its state."""
    return data_dir / STATE_FILE


def snapshot(
    nodes: list[NatsNode], nats_url: str, specs: list[ServiceSpec]
) -> dict[str, Any]:
    """The state as JSON-ready data."""
    by_name = {s.name: s for s in specs}
    nats = []
    for node in nodes:
        spec = by_name.get(node.name)
        nats.append(
            {
                "name": node.name,
                "pid": spec.pid if spec else None,
                "url": node.url,
                "store": str(node.store),
                "restarts": spec.restarts if spec else 0,
            }
        )
    names = {n.name for n in nodes}
    services = [
        {"name": s.name, "pid": s.pid, "restarts": s.restarts}
        for s in specs
        if s.name not in names
    ]
    return {
        "pid": os.getpid(),
        "nats_url": nats_url,
        "nats": nats,
        **{"services": services},
    }


def write_state(data_dir: Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically (0600)."""
    path = state_path(data_dir)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, path)


def read_state(data_dir: Path) -> dict[str, Any] | None:
    """The last state ``up`` recorded here, or None if it never ran here."""
    try:
        data: dict[str, Any] = json.loads(state_path(data_dir).read_text())
    except (OSError, ValueError):
        return None
    return data
