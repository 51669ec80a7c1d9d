"""The ``sandboxhost`` fixture starts a real host other rooms can rely on."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.plugins.sandboxhost import AGENTBUS, SandboxHostProcess


def test_fixture_host_answers_health_and_reports_isolation(
    sandboxhost: SandboxHostProcess,
) -> None:
    with urllib.request.urlopen(sandboxhost.url + "/health", timeout=5) as resp:
        assert resp.status == 204
    info = sandboxhost.info()
    assert info["isolation"] == "bwrap"
    assert sandboxhost.api_key.startswith("e2b_")
    assert len(sandboxhost.api_key) == 44
    assert sandboxhost.env()["E2B_SANDBOX_URL"] == sandboxhost.url


def test_control_plane_refuses_a_wrong_api_key(sandboxhost: SandboxHostProcess) -> None:
    req = urllib.request.Request(
        sandboxhost.url + "/v2/sandboxes", headers={"X-API-KEY": "e2b_" + "0" * 40}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 401
    with err.value:
        assert json.loads(err.value.read())["code"] == 401


def test_env_command_prints_the_e2b_variables_of_the_running_host(
    sandboxhost: SandboxHostProcess,
) -> None:
    done = subprocess.run(
        [str(AGENTBUS), "sandboxhost", "env", "--data-dir", str(sandboxhost.data_dir)],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")},
    )
    assert done.stdout.splitlines() == [
        f"{k}={v}" for k, v in sandboxhost.env().items()
    ]


def test_a_bad_setting_exits_2_naming_the_variable(tmp_path: Path) -> None:
    env = dict(os.environ, AGENTBUS_SANDBOXHOST_ISOLATION="chroot")
    done = subprocess.run(
        [str(AGENTBUS), "sandboxhost", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 2
    assert "AGENTBUS_SANDBOXHOST_ISOLATION" in done.stderr
