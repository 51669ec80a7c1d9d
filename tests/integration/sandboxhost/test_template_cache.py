"""Template layers: one build per recipe shared by hosts; a failed build degrades.

Real sandbox host processes, each with a private template cache.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from services.broker.providers import E2bProvider
from tests.plugins.sandboxhost import SandboxHostProcess
from tests.support.sandboxhost import control

FILES_ONLY = {"files": {"etc/motd": "cached template\n"}}


def _host(factory, cache: Path, name: str, recipe: dict) -> SandboxHostProcess:
    env = dict(os.environ)
    env["AGENTBUS_SANDBOXHOST_TEMPLATE_CACHE"] = str(cache)
    env["AGENTBUS_SANDBOXHOST_PREBUILD"] = ""
    host = factory(env=env)
    (host.data_dir / "templates" / f"{name}.json").write_text(json.dumps(recipe))
    return host


def _create(host: SandboxHostProcess, template: str) -> tuple[int, dict]:
    return control(host, "POST", "/sandboxes", {"templateID": template, "timeout": 60})


def test_two_hosts_share_one_build_of_a_recipe(sandboxhost_factory, tmp_path):
    cache, name = tmp_path / "cache", f"files-{secrets.token_hex(3)}"
    one = _host(sandboxhost_factory, cache, name, FILES_ONLY)
    two = _host(sandboxhost_factory, cache, name, FILES_ONLY)
    made = []
    try:
        for host in (one, two):
            status, body = _create(host, name)
            assert status == 201, body
            made.append((host, body["sandboxID"]))
        built = [p for p in cache.iterdir() if p.is_dir()]
        assert len(built) == 1, built
        for host in (one, two):
            assert (host.data_dir / "templates" / name).resolve() == built[0]
        assert (built[0] / "layer" / "etc" / "motd").read_text() == "cached template\n"
        assert "building template" in one.log_path.read_text()
        assert "building template" not in two.log_path.read_text()
    finally:
        for host, sid in made:
            control(host, "DELETE", f"/sandboxes/{sid}")


async def test_a_failed_build_is_named_once_and_the_broker_falls_back_to_base(
    sandboxhost_factory, tmp_path, caplog
):
    name = f"broken-{secrets.token_hex(3)}"
    recipe = {"apt": ["agentbus-no-such-package"]}
    host = _host(sandboxhost_factory, tmp_path / "cache", name, recipe)
    first = _create(host, name)
    again = _create(host, name)
    assert first[0] == 500
    assert f"template {name}: build failed" in first[1]["message"]
    assert again == first, "the failure is answered again, not rebuilt"
    assert host.log_path.read_text().count(f"building template {name}") == 1
    provider = E2bProvider(
        "local", host.url, host.api_key, sandbox_url=host.url, template=name
    )
    try:
        conn = await provider.create({"why": "fallback"}, secrets.token_hex(8))
        status, info = control(host, "GET", f"/sandboxes/{conn.sandbox_id}")
        assert status == 200
        assert info["templateID"] == "base"
        assert f"template {name} unavailable" in caplog.text
        await provider.kill(conn.sandbox_id)
    finally:
        await provider.close()
