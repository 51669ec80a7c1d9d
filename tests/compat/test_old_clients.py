"""The same compat suites, run in a subprocess with e2b 2.45 first on sys.path.

The client is installed by ``scripts/install_compat_clients.sh`` into
``.venv/e2b245``; 2.45 still calls the earlier control-plane paths
(``POST /sandboxes``, ``POST /sandboxes/{id}/connect``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OLD_CLIENT = REPO / ".venv" / "e2b245"
SUITES = [
    "tests/compat/test_e2b_async.py",
    "tests/compat/test_e2b_sync.py",
    "tests/compat/test_e2b_parity.py",
]


@pytest.mark.skipif(
    os.environ.get("SANDBOXHOST_COMPAT_NESTED") == "1", reason="already the nested run"
)
@pytest.mark.timeout(240)
def test_compat_suites_pass_with_e2b_2_45() -> None:
    if not (OLD_CLIENT / "e2b").is_dir():
        subprocess.run(
            [str(REPO / "scripts" / "install_compat_clients.sh")], check=True
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(OLD_CLIENT), str(REPO)])
    env["SANDBOXHOST_COMPAT_NESTED"] = "1"
    env.pop("PYTEST_XDIST_WORKER", None)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.metadata as m; print(m.version('e2b'))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip().startswith("2.45")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", *SUITES],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout
