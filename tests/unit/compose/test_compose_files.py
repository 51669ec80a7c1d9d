"""compose/ validated statically (no Docker engine here): every piece must be real."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

from services.cli import COMMANDS, known_env_names
from services.common.natsserver import nats_server_binary
from services.launcher.natsconf import compose_users

COMPOSE = Path(__file__).resolve().parents[3] / "compose"


def _compose() -> dict:
    return yaml.safe_load((COMPOSE / "compose.yaml").read_text())


def test_every_agentbus_container_runs_a_real_command():
    services = _compose()["services"]
    roles = {name: svc for name, svc in services.items() if name != "nats"}
    assert set(roles) == {
        "gateway",
        "pool",
        "broker",
        "projector",
        "notifier",
        "sandboxhost",
    }
    for name, svc in roles.items():
        assert svc["command"][0] == name
        assert name in COMMANDS


def test_every_agentbus_variable_in_compose_is_read_by_some_service():
    known = known_env_names()
    for name, svc in _compose()["services"].items():
        for var in svc.get("environment", {}):
            if var.startswith("AGENTBUS_"):
                assert var in known, f"{name}: {var} is read by no service"


def test_each_service_connects_with_its_own_nats_user():
    services = _compose()["services"]
    users = {
        name: svc["environment"].get("AGENTBUS_NATS_USER")
        for name, svc in services.items()
        if name not in {"nats", "sandboxhost"}
    }
    assert users == {n: n for n in users}
    assert "AGENTBUS_NATS_URL" not in services["sandboxhost"]["environment"]


def test_nats_conf_passes_the_servers_own_config_check(tmp_path):
    text = (COMPOSE / "nats.conf").read_text().replace("/data/jetstream", str(tmp_path))
    conf = tmp_path / "nats.conf"
    conf.write_text(text)
    env = dict(os.environ)
    for var in set(re.findall(r"\$([A-Z_]+)", text)):
        env[var] = "x" * 16
    result = subprocess.run(
        [nats_server_binary(), "-c", str(conf), "-t"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_copies_only_paths_that_exist():
    root = COMPOSE.parent
    for line in (COMPOSE / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (root / src).exists(), src


def _cluster() -> dict:
    return yaml.safe_load((COMPOSE / "compose.cluster.yaml").read_text())


def _interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?message} substitution."""

    def one(m: re.Match[str]) -> str:
        name, _, rest = m.group(1).partition(":")
        return env.get(name, rest[1:] if rest.startswith("-") else "")

    return re.sub(r"\$\{([^}]+)\}", one, value)


def test_cluster_runs_three_nats_nodes_and_two_of_each_service():
    services = _cluster()["services"]
    nodes = sorted(n for n in services if n.startswith("nats-"))
    assert nodes == ["nats-1", "nats-2", "nats-3"]
    roles = [n.rsplit("-", 1)[0] for n in services if not n.startswith("nats-")]
    for role in ("gateway", "pool", "broker", "projector"):
        assert roles.count(role) == 2, role
    for name, svc in services.items():
        if name.startswith("nats-"):
            continue
        role = svc["command"][0]
        assert role in COMMANDS
        assert name.startswith(role)
        env = svc.get("environment", {})
        assert all(v in known_env_names() for v in env if v.startswith("AGENTBUS_"))
        if role != "sandboxhost":
            assert env["AGENTBUS_NATS_USER"] == role
            urls = env["AGENTBUS_NATS_URL"].split(",")
            assert urls == [f"nats://{n}:4222" for n in nodes]
            assert env["AGENTBUS_JS_REPLICAS"] == "3"
    assert "bus" not in services["sandboxhost"]["networks"]


def test_each_cluster_node_config_passes_the_servers_config_check(tmp_path):
    secrets = {
        v: "p" * 16
        for v in ("NATS_ROUTE_PASSWORD", "GATEWAY_NATS_PASSWORD", "POOL_NATS_PASSWORD")
    }
    secrets |= {"BROKER_NATS_PASSWORD": "b" * 16, "PROJECTOR_NATS_PASSWORD": "q" * 16}
    text = (COMPOSE / "nats-cluster.conf").read_text()
    conf = tmp_path / "nats.conf"
    conf.write_text(text.replace("/data/jetstream", str(tmp_path)))
    for name in ("nats-1", "nats-2", "nats-3"):
        svc = _cluster()["services"][name]
        env = {k: _interpolate(str(v), secrets) for k, v in svc["environment"].items()}
        assert env["NATS_SERVER_NAME"] == name
        routes = env["NATS_ROUTES"]
        assert all(f"@{n}:6222" in routes for n in ("nats-1", "nats-2", "nats-3"))
        result = subprocess.run(
            [nats_server_binary(), "-c", str(conf), "-t"],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_compose_users_are_the_generated_allow_lists():
    for conf in ("nats.conf", "nats-cluster.conf"):
        assert compose_users() in (COMPOSE / conf).read_text(), conf
