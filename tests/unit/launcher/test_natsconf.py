"""Embedded NATS config: one credential per service, checked by nats-server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import stat
import subprocess

import nats
import nats.errors
import pytest

from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.names import BusNames
from services.common.natsserver import NatsServerProcess, nats_server_binary
from services.launcher.natsconf import (
    SERVICES,
    allowed,
    load_credentials,
    write_config,
)


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


def test_the_config_holds_hashes_and_never_a_password(tmp_path):
    creds = load_credentials(tmp_path)
    text = write_config(tmp_path, creds).read_text()
    assert not any(password in text for password in creds.values())
    assert text.count('password: "$2a$10$') == len(SERVICES)


async def test_a_wrong_password_is_refused(guarded):
    # Spoken on a raw socket: nats.py leaks its transport on a refused login.
    server, creds = guarded
    host, port = server.url.removeprefix("nats://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        assert (await reader.readline()).startswith(b"INFO ")
        hello = {"user": "pool", "pass": creds["gateway"], "verbose": False}
        writer.write(b"CONNECT " + json.dumps(hello).encode() + b"\r\nPING\r\n")
        answer = await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    assert answer.startswith(b"-ERR 'Authorization Violation'"), answer


async def _login(server: NatsServerProcess, user: str, password: str):
    violations: asyncio.Queue[str] = asyncio.Queue()

    async def on_error(exc: Exception) -> None:
        violations.put_nowait(str(exc))

    nc = await nats.connect(server.url, user=user, password=password, error_cb=on_error)
    return nc, violations


@pytest.fixture
async def guarded(tmp_path):
    creds = load_credentials(tmp_path)
    server = NatsServerProcess(
        tmp_path / "store", config_file=write_config(tmp_path, creds)
    )
    await server.astart()
    try:
        yield server, creds
    finally:
        server.stop()


@pytest.mark.timeout(30)
async def test_only_the_writers_may_publish_into_the_log(guarded):
    server, creds = guarded
    names = BusNames()
    subject = names.log_subject("s1", 1, "user.prompt")
    admin, _ = await _login(server, "admin", creds["admin"])
    projector, violations = await _login(server, "projector", creds["projector"])
    try:
        js = admin.jetstream()
        await ensure_log_stream(js, names, EventStoreSettings())
        for writer in ("gateway", "pool", "broker"):
            nc, _ = await _login(server, writer, creds[writer])
            assert (await nc.jetstream().publish(subject, b"{}", timeout=5)).seq > 0
            await nc.close()
        await projector.publish(subject, b"{}")
        problem = await asyncio.wait_for(violations.get(), 10)
        assert "permissions violation" in problem.lower()
        assert subject in problem
        await projector.subscribe(names.broker_bind)
        problem = await asyncio.wait_for(violations.get(), 10)
        assert "subscription" in problem.lower()
        assert names.broker_bind in problem
        assert (await js.stream_info(names.log_stream)).state.messages == 3
    finally:
        await projector.close()
        await admin.close()


def test_every_role_has_an_allow_list_with_no_wildcard_but_admin():
    for role in SERVICES:
        pub, sub = allowed(role)
        assert pub
        assert sub
        if role != "admin":
            assert ">" not in pub + sub
    assert not any(s.startswith("agentbus.log") for s in allowed("projector")[0])


@pytest.mark.timeout(30)
async def test_the_projector_reads_the_log_stream_but_cannot_change_it(guarded):
    server, creds = guarded
    names = BusNames()
    admin, _ = await _login(server, "admin", creds["admin"])
    projector, violations = await _login(server, "projector", creds["projector"])
    try:
        await ensure_log_stream(admin.jetstream(), names, EventStoreSettings())
        js = projector.jetstream()
        info = await js.stream_info(names.log_stream)
        assert info.config.max_msgs == EventStoreSettings().log_max_msgs
        changed = dataclasses.replace(info.config, max_msgs=5)
        for api, attempt in (("update", js.update_stream), ("create", js.add_stream)):
            with pytest.raises((TimeoutError, nats.errors.NoRespondersError)):
                await asyncio.wait_for(attempt(changed), 5)
            problem = (await asyncio.wait_for(violations.get(), 10)).lower()
            assert "permissions violation" in problem
            assert f"$js.api.stream.{api}.{names.log_stream.lower()}" in problem
        after = await admin.jetstream().stream_info(names.log_stream)
        assert after.config.max_msgs == info.config.max_msgs
    finally:
        await projector.close()
        await admin.close()
