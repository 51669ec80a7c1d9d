"""Every service started while NATS is unreachable still stops on SIGTERM.

The "server" here accepts each TCP connection and closes it at once (NATS
unreachable, as with a refused port), so the test knows the service is inside
its connect loop — its signal handlers installed — before it sends SIGTERM.
A clean exit is status 0; a SIGTERM that arrived too early would show as -15.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "service", ["gateway", "pool", "broker", "projector", "notifier"]
)
async def test_sigterm_stops_a_service_that_never_reached_nats(
    service: str, tmp_path: Path
) -> None:
    attempts = asyncio.Event()

    async def refuse(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        attempts.set()
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
    env["AGENTBUS_DATA_DIR"] = str(tmp_path)
    argv = [sys.executable, "-m", "services.cli", service]
    argv += ["--nats", f"nats://127.0.0.1:{port}"]
    if service == "projector":
        argv += ["--db", str(tmp_path / "projection.db")]
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=tmp_path, env=env | {"PYTHONPATH": str(ROOT)}
    )
    try:
        await asyncio.wait_for(attempts.wait(), 30.0)
        proc.send_signal(signal.SIGTERM)
        status = await asyncio.wait_for(proc.wait(), 10.0)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        server.close()
        await server.wait_closed()
    assert status == 0
