"""The embedded NATS of ``agentbus up``: one node, or a 3-node JetStream cluster.

Each node gets its own client port, route port (cluster only), store under the
data dir and config file (0600: it holds passwords). Routes authenticate with a
generated password so no local process can join the cluster as a server and
step around the per-service permissions. A store is opened only under an
exclusive ``flock`` that the nats-server process inherits, so two servers can
never share one store, even for a moment after ``up`` itself died.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from services.common.natsserver import free_port, nats_server_binary
from services.launcher.natsconf import render_config

CLUSTER_NAME = "agentbus"


class StoreInUse(Exception):
    """Another process (a second ``agentbus up``) holds a store's lock."""


@dataclass(frozen=True)
class NatsNode:
    """One nats-server of the embedded NATS."""

    name: str
    store: Path
    config: Path
    port: int
    route_port: int | None = None
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        """Client URL of this node."""
        return f"nats://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        """Command line of this node (everything is in its config file)."""
        return [nats_server_binary(), "-c", str(self.config)]


def plan_nodes(nats_dir: Path, count: int, first_port: int) -> list[NatsNode]:
    """Where nodes live: ``nats/store`` alone, ``nats/nats-<i>/store`` in a cluster.

    Client ports are ``first_port + i`` where free (else any free port), so a
    restart of ``up`` usually keeps the addresses; route ports are any free port.
    """
    if count == 1:
        port = first_port if port_free(first_port) else free_port()
        return [NatsNode("nats-0", nats_dir / "store", nats_dir / "nats.conf", port)]
    nodes = []
    for i in range(count):
        port = first_port + i if port_free(first_port + i) else free_port()
        node_dir = nats_dir / f"nats-{i}"
        nodes.append(
            NatsNode(
                f"nats-{i}",
                node_dir / "store",
                node_dir / "nats.conf",
                port,
                route_port=free_port(),
            )
        )
    return nodes


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if ``port`` can be bound on ``host`` right now."""
    with socket.socket() as sock:
        # As nats-server binds: connections of a stopped run in TIME_WAIT don't count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def render_node(
    node: NatsNode,
    peers: list[NatsNode],
    creds: dict[str, str],
    route_password: str,
    prefix: str = "agentbus",
) -> str:
    """The config text of one node."""
    text = [
        f"server_name: {json.dumps(node.name)}",
        f"listen: {json.dumps(f'{node.host}:{node.port}')}",
        f"jetstream {{ store_dir: {json.dumps(str(node.store))} }}",
    ]
    if node.route_port is not None:
        routes = ", ".join(
            json.dumps(f"nats-route://route:{route_password}@{p.host}:{p.route_port}")
            for p in peers
            if p is not node
        )
        text.append(
            f"cluster {{\n  name: {CLUSTER_NAME}\n"
            f"  listen: {json.dumps(f'{node.host}:{node.route_port}')}\n"
            f'  authorization {{ user: route, password: "{route_password}" }}\n'
            f"  routes: [{routes}]\n}}"
        )
    return "\n".join(text) + "\n" + render_config(creds, prefix)


def write_nodes(
    nodes: list[NatsNode],
    creds: dict[str, str],
    nats_dir: Path,
    prefix: str = "agentbus",
) -> None:
    """Write every node's config (0600) and create its store directory (0700).

    The permissions name subjects under ``prefix`` (the services' bus prefix).
    """
    route_password = _route_password(nats_dir)
    for node in nodes:
        node.store.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write_private(
            node.config, render_node(node, nodes, creds, route_password, prefix)
        )


def lock_store(node: NatsNode) -> int:
    """Take the store's exclusive lock; the returned fd is handed to nats-server.

    Raises :class:`StoreInUse` naming the holder if someone else has it.
    """
    path = node.store.parent / f"{node.store.name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StoreInUse(
            f"the NATS store {node.store} is in use (lock {path} held, "
            f"written by pid {holder}): is another `agentbus up` running on "
            "this data dir?"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _route_password(nats_dir: Path) -> str:
    path = nats_dir / "route_password"
    if path.exists():
        return path.read_text().strip()
    password = secrets.token_hex(24)
    _write_private(path, password + "\n")
    return password


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
