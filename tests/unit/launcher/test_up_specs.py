"""`agentbus up --replicas N`: N of each replicated service, one sandbox host."""

from __future__ import annotations

import signal

from services.launcher.settings import LauncherSettings
from services.launcher.up import _specs


def test_replicas_run_n_of_each_service_with_distinct_names(tmp_path):
    specs = _specs(LauncherSettings(replicas=3), tmp_path, "nats://a:1,nats://b:2", {})
    names = [s.name for s in specs]
    assert names.count("sandboxhost") == 1
    for role in ("gateway", "pool", "broker", "projector"):
        assert [n for n in names if n.startswith(role)] == [
            f"{role}-{i}" for i in (1, 2, 3)
        ]
    brokers = [s for s in specs if s.name.startswith("broker")]
    assert [s.env["AGENTBUS_BROKER_REPLICA_ID"] for s in brokers] == [
        "broker-1",
        "broker-2",
        "broker-3",
    ]
    gateways = [s for s in specs if s.name.startswith("gateway")]
    assert len({tuple(s.argv) for s in gateways}) == 1  # one shared listen address
    assert all(s.env["AGENTBUS_NATS_URL"] == "nats://a:1,nats://b:2" for s in specs)
    host = next(s for s in specs if s.name == "sandboxhost")
    assert host.death_signal == signal.SIGTERM
    assert gateways[0].death_signal == signal.SIGKILL


def test_one_replica_keeps_the_plain_names(tmp_path):
    names = [s.name for s in _specs(LauncherSettings(), tmp_path, "nats://a:1", {})]
    assert "gateway" in names
    assert "pool" in names
    assert not any(n.endswith("-1") for n in names)
