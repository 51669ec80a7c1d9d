"""compose/ validated statically (no Docker engine here): every piece must be real."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

from services.cli import COMMANDS, known_env_names
from services.common.natsserver import nats_server_binary

COMPOSE = Path(__file__).resolve().parents[3] / "compose"


def _compose() -> dict:
    return yaml.safe_load((COMPOSE / "compose.yaml").read_text())


def test_every_agentbus_container_runs_a_real_command():
    services = _compose()["services"]
    roles = {name: svc for name, svc in services.items() if name != "nats"}
    assert set(roles) == {"gateway", "pool", "broker", "projector", "sandboxhost"}
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
