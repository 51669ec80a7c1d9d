"""Embedded NATS config: one credential per service, checked by nats-server."""

from __future__ import annotations

import stat
import subprocess

from services.common.natsserver import nats_server_binary
from services.launcher.natsconf import SERVICES, load_credentials, write_config


def test_credentials_are_per_service_private_and_stable(tmp_path):
    creds = load_credentials(tmp_path)
    assert set(creds) == set(SERVICES)
    assert len(set(creds.values())) == len(SERVICES)
    mode = stat.S_IMODE((tmp_path / "credentials.json").stat().st_mode)
    assert mode == 0o600
    assert load_credentials(tmp_path) == creds


def test_generated_config_passes_nats_server_config_check(tmp_path):
    path = write_config(tmp_path, load_credentials(tmp_path))
    result = subprocess.run(
        [nats_server_binary(), "-c", str(path), "-t"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr + result.stdout
