"""The ``sandboxhost`` fixture starts a real host other rooms can rely on."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.plugins.sandboxhost import SandboxHostProcess


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
