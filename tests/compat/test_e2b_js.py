"""The unmodified JavaScript SDK (npm ``e2b``) through the parity features.

``scripts/install_compat_clients.sh`` installs it into ``.venv/e2b-js``;
``tests/compat/js/parity.mjs`` drives it against the session's sandbox host and
prints what it saw as one JSON object, checked here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
JS_DIR = REPO / ".venv" / "e2b-js"
SCRIPT = REPO / "tests" / "compat" / "js" / "parity.mjs"


@pytest.fixture(scope="module")
def js_result(e2b_env: dict[str, str]) -> dict[str, Any]:
    """Run the JS script once (it kills what it creates)."""
    if os.environ.get("SANDBOXHOST_COMPAT_NESTED") == "1":
        pytest.skip("the nested 2.45 run is Python-only")
    node = shutil.which("node")
    assert node, "node is required (the JS SDK compat suite)"
    if not (JS_DIR / "node_modules" / "e2b" / "package.json").exists():
        subprocess.run(
            [str(REPO / "scripts" / "install_compat_clients.sh")], check=True
        )
    env = {**os.environ, **e2b_env, "E2B_JS_DIR": str(JS_DIR)}
    done = subprocess.run(
        [node, str(SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_js_files_metadata_mode_symlink_and_expired_url(
    js_result: dict[str, Any],
) -> None:
    assert js_result["metadata"] == {"owner": "js"}
    assert js_result["listedMetadata"] == {"owner": "js"}
    assert js_result["dirMode"] == 0o755
    assert js_result["symlinkTarget"] == "/workspace/m.txt"
    assert js_result["expired"]["status"] == 401
    assert "signature is already expired" in js_result["expired"]["body"]


def test_js_snapshots_and_fork(js_result: dict[str, Any]) -> None:
    assert js_result["snapshotsListed"] == [js_result["snapshotId"]]
    assert js_result["childRead"] == "js"
    assert js_result["parentRead"] == "changed"
    assert js_result["deleted"] == [True, False]
    assert js_result["forkRead"] == "changed"
    assert js_result["forkIsNew"] is True


def test_js_metrics_and_listing(js_result: dict[str, Any]) -> None:
    metrics = js_result["metrics"]
    assert metrics is not None
    assert metrics["cpuCount"] >= 1
    assert metrics["memTotal"] > 0
    assert metrics["diskTotal"] > 0
    running, paused = js_result["expectedListed"]
    assert sorted(js_result["listed"]) == sorted(
        [[running, "running"], [paused, "paused"]]
    )


def test_js_lifecycle_and_kill_message(js_result: dict[str, Any]) -> None:
    assert js_result["napperPaused"] == "paused"
    assert js_result["napperRead"] == "kept"
    assert js_result["napperAfter"] == "running"
    assert "killed or reached its end of life" in js_result["killError"]
