"""Templates (read-only shared layers) and copy-on-write snapshots, on the real host."""

from __future__ import annotations

import json
import os
import secrets

import pytest
from e2b import AsyncSandbox
from e2b.exceptions import SandboxException

from tests.integration.sandboxhost.support import control, opts, until
from tests.plugins.sandboxhost import SandboxHostProcess

TINY = {
    "apt": ["sl"],
    "pip": ["tomli-w"],
    "files": {"etc/motd": "tiny template\n"},
}


def overlay(host: SandboxHostProcess) -> bool:
    """True if the host mounts copy-on-write layers (root with overlayfs)."""
    _, info = control(host, "GET", "/admin/info")
    return bool(info["snapshots"] == "overlay")


async def test_template_layer_is_built_once_shared_and_read_only(
    sandboxhost: SandboxHostProcess,
) -> None:
    name = f"tiny-{secrets.token_hex(3)}"
    (sandboxhost.data_dir / "templates" / f"{name}.json").write_text(json.dumps(TINY))
    first = await AsyncSandbox.create(template=name, timeout=120, **opts(sandboxhost))
    layer = sandboxhost.data_dir / "templates" / name / "layer"
    built = layer.stat().st_ino
    second = await AsyncSandbox.create(template=name, timeout=120, **opts(sandboxhost))
    try:
        assert layer.stat().st_ino == built, "second create reused the layer"
        script = (
            "command -v sl; cat /agentbus/template/etc/motd; "
            "python3 -c 'import tomli_w; print(tomli_w.__file__)'; "
            "stat -c %i /agentbus/template/etc/motd"
        )
        one = await first.commands.run(script)
        two = await second.commands.run(script)
        lines = one.stdout.splitlines()
        assert lines[0] == "/agentbus/template/usr/games/sl"
        assert lines[1] == "tiny template"
        assert lines[2].startswith("/agentbus/template/python/tomli_w/")
        assert lines[3] == two.stdout.splitlines()[3], "one inode: shared, not copied"
        denied = await first.commands.run(
            "touch /agentbus/template/x 2>&1; echo rc=$?", timeout=20
        )
        assert "Read-only file system" in denied.stdout
        base = await AsyncSandbox.create(timeout=60, **opts(sandboxhost))
        try:
            plain = await base.commands.run("ls /agentbus 2>&1; true")
            assert "No such file" in plain.stdout
        finally:
            await base.kill()
    finally:
        await first.kill()
        await second.kill()


async def test_unknown_template_is_refused(sandboxhost: SandboxHostProcess) -> None:
    with pytest.raises(SandboxException) as caught:
        await AsyncSandbox.create(template="no-such-template", **opts(sandboxhost))
    assert "template no-such-template not found" in str(caught.value)


async def test_bad_recipe_names_the_field(sandboxhost: SandboxHostProcess) -> None:
    name = f"bad-{secrets.token_hex(3)}"
    recipe = {"apt": ["sl"], "files": {"../escape": "x"}}
    (sandboxhost.data_dir / "templates" / f"{name}.json").write_text(json.dumps(recipe))
    with pytest.raises(SandboxException) as caught:
        await AsyncSandbox.create(template=name, **opts(sandboxhost))
    assert "bad file path '../escape'" in str(caught.value)


async def test_start_from_snapshot_copies_nothing_and_fork_keeps_parent_running(
    sandboxhost: SandboxHostProcess,
) -> None:
    if not overlay(sandboxhost):
        pytest.skip("no overlayfs here: snapshots are full copies")
    sbx = await AsyncSandbox.create(timeout=120, **opts(sandboxhost))
    try:
        await sbx.commands.run(
            "mkdir -p /workspace/many && cd /workspace/many && "
            "for i in $(seq 1 200); do head -c 4096 /dev/urandom > f$i; done"
        )
        counter = await sbx.commands.run(
            "i=0; while :; do i=$((i+1)); echo $i > /tmp/n.t; mv /tmp/n.t /tmp/n; "
            "sleep 0.02; done",
            background=True,
            timeout=0,
        )
        snap = await sbx.create_snapshot()
        child = await AsyncSandbox.create(
            template=snap.snapshot_id, timeout=60, **opts(sandboxhost)
        )
        try:
            listing = await child.commands.run("ls /workspace/many | wc -l")
            assert listing.stdout.strip() == "200"
            sdir = sandboxhost.data_dir / "sandboxes" / child.sandbox_id
            # The upper is on the sandbox's quota disk where quotas are on.
            upper = next(
                p for p in (sdir / "disk" / "upper", sdir / "upper") if p.is_dir()
            )
            copied = [p for p in upper.rglob("f*") if p.is_file()]
            assert copied == [], "the child's own layer holds none of the files"
        finally:
            await child.kill()
        before = int(await sbx.files.read("/tmp/n"))
        [fork] = await sbx.fork()
        await fork.kill()

        async def advanced() -> bool:
            return int(await sbx.files.read("/tmp/n")) > before

        await until(advanced)
        await counter.kill()
        assert await AsyncSandbox.delete_snapshot(snap.snapshot_id, **opts(sandboxhost))
        layers = sandboxhost.data_dir / "layers"
        assert not (layers / snap.snapshot_id).exists(), "unused layer collected"
        assert os.path.isdir(layers / "base")
    finally:
        await sbx.kill()


@pytest.mark.timeout(600)
async def test_default_template_has_python_git_node_build_tools_and_an_lsp(
    sandboxhost: SandboxHostProcess,
) -> None:
    sbx = await AsyncSandbox.create(
        template="default", timeout=120, **opts(sandboxhost)
    )
    try:
        done = await sbx.commands.run(
            "python3 --version && git --version && node --version && "
            "gcc --version | head -1 && make --version | head -1 && "
            "command -v pylsp && pylsp --version",
            timeout=120,
        )
        out = done.stdout
        assert "Python 3" in out
        assert "git version" in out
        assert out.splitlines()[2].startswith("v")
        assert "/agentbus/template/python/bin/pylsp" in out
        assert "pylsp v" in out
    finally:
        await sbx.kill()
