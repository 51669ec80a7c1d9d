"""A real 3-node JetStream cluster on loopback, laid out as `agentbus up` lays it."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.common.natsserver import free_port
from services.launcher.natsconf import load_credentials
from services.launcher.natsnodes import NatsNode, plan_nodes, write_nodes
from services.launcher.ready import wait_nats_ready


class Cluster:
    """Three nats-server nodes; any one can be killed and started again."""

    def __init__(self, nats_dir: Path) -> None:
        self.creds = load_credentials(nats_dir)
        self.nodes = plan_nodes(nats_dir, 3, free_port())
        write_nodes(self.nodes, self.creds, nats_dir)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """Every node, comma-separated (as services get it)."""
        return ",".join(n.url for n in self.nodes)

    def start(self, node: NatsNode) -> None:
        """Start one node (its log beside its store)."""
        with (node.store.parent / "server.log").open("ab") as out:
            self.procs[node.name] = subprocess.Popen(
                node.argv(), stdout=out, stderr=subprocess.STDOUT
            )

    def kill(self, name: str) -> None:
        """SIGKILL one node."""
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        """Stop every node."""
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            proc.wait(timeout=20)
        self.procs.clear()

    def node(self, name: str) -> NatsNode:
        """A node by server name."""
        return next(n for n in self.nodes if n.name == name)


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    """The cluster, JetStream ready on every node."""
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    for node in c.nodes:
        c.start(node)
    try:
        await wait_nats_ready(
            [n.url for n in c.nodes], "admin", c.creds["admin"], asyncio.Event()
        )
        yield c
    finally:
        c.stop()
