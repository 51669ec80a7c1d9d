"""``agentbus up``: the whole stack on one machine.

Starts an embedded nats-server (JetStream store under the data dir, loopback
only, one generated credential per service) unless ``--nats`` names one, then
each service as its own OS process. Services missing from this build are not
started. Ctrl-C / SIGTERM stops everything; nothing is left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from pathlib import Path

from services.cli import available, known_env_names
from services.common.lifecycle import install_stop_signals
from services.common.localnats import record_url
from services.common.natsserver import NatsServerProcess, free_port
from services.common.settings import SettingsError, check_unknown, load_settings
from services.gateway.tokens import issue, load_secret
from services.launcher.natsconf import load_credentials, write_config
from services.launcher.settings import LauncherSettings
from services.launcher.supervisor import ServiceSpec, Supervisor
from services.sandboxhost.service import api_key
from services.sandboxhost.settings import SandboxHostSettings

log = logging.getLogger("agentbus.up")

# Start order: the hands first, the App's door last.
ORDER = ("sandboxhost", "projector", "broker", "pool", "gateway", "notifier")


def parse(argv: list[str]) -> argparse.Namespace:
    """Flags of ``agentbus up`` (they override the AGENTBUS_* variables)."""
    p = argparse.ArgumentParser(prog="agentbus up", description=__doc__)
    p.add_argument("--data-dir", help="state directory (default ./.agentbus)")
    p.add_argument("--http", help="gateway HOST:PORT (default 127.0.0.1:8080)")
    p.add_argument(
        "--nats", dest="nats_url", help="use this NATS instead of embedding one"
    )
    p.add_argument("--approval", choices=["auto", "ask-exec", "ask-all"])
    p.add_argument("--workers", dest="pool_workers", type=int, help="warm workers")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    """Entry point."""
    args = parse(argv)
    logging.basicConfig(
        level=logging.INFO, format="[up] %(message)s", stream=sys.stdout
    )
    try:
        check_unknown(os.environ, known_env_names())
        settings = load_settings(LauncherSettings, os.environ, vars(args))
    except SettingsError as exc:
        print(f"agentbus up: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(run(settings))


async def run(settings: LauncherSettings, stop: asyncio.Event | None = None) -> int:
    """Start NATS and the services; return once stopped."""
    stop = stop or asyncio.Event()
    install_stop_signals(stop)
    data_dir = Path(settings.data_dir).resolve()  # noqa: ASYNC240 - start-up only
    data_dir.mkdir(parents=True, exist_ok=True)
    nats_server, nats_url, creds = _start_nats(settings, data_dir)
    supervisor = Supervisor(settings.restart_backoff_s, settings.restart_backoff_max_s)
    specs = _specs(settings, data_dir, nats_url, creds)
    _banner(settings, data_dir, [s.name for s in specs])
    runner = asyncio.create_task(supervisor.run(specs))
    try:
        await stop.wait()
    finally:
        log.info("stopping")
        await supervisor.stop()
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        if nats_server is not None:
            nats_server.stop()
        log.info("stopped")
    return 0


def _start_nats(
    settings: LauncherSettings, data_dir: Path
) -> tuple[NatsServerProcess | None, str, dict[str, str]]:
    if settings.nats_url:
        return None, settings.nats_url, {}
    nats_dir = data_dir / "nats"
    creds = load_credentials(nats_dir)
    config = write_config(nats_dir, creds)
    port = settings.nats_port if _port_free(settings.nats_port) else free_port()
    server = NatsServerProcess(nats_dir / "store", port=port, config_file=config)
    server.start()
    record_url(nats_dir, server.url)
    log.info("nats-server on %s (JetStream store %s)", server.url, nats_dir / "store")
    return server, server.url, creds


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _sandboxhost_key(data_dir: Path) -> str:
    """The sandbox host's API key, shared with the broker.

    The host's own rule (configured, else generated once into its data dir), so
    ``agentbus sandboxhost env --data-dir <data>/sandboxhost`` finds the same key.
    """
    host_dir = data_dir / "sandboxhost"
    host_dir.mkdir(parents=True, exist_ok=True)
    configured = os.environ.get("AGENTBUS_SANDBOXHOST_API_KEY", "")
    return api_key(SandboxHostSettings(sandboxhost_api_key=configured), host_dir)


def _specs(
    settings: LauncherSettings, data_dir: Path, nats_url: str, creds: dict[str, str]
) -> list[ServiceSpec]:
    present = available()
    sandbox_url = f"http://{settings.sandboxhost_listen}"
    shared = {
        "AGENTBUS_DATA_DIR": str(data_dir),
        "AGENTBUS_SANDBOXHOST_API_KEY": _sandboxhost_key(data_dir),
        "AGENTBUS_SANDBOXHOST_URL": sandbox_url,
        "AGENTBUS_APPROVAL": settings.approval,
        "AGENTBUS_POOL_WORKERS": str(settings.pool_workers),
    }
    argv = {
        "sandboxhost": [
            "--listen",
            settings.sandboxhost_listen,
            "--data-dir",
            str(data_dir / "sandboxhost"),
        ],
        "projector": ["--nats", nats_url, "--db", str(data_dir / "projection.db")],
        "broker": ["--nats", nats_url],
        "pool": ["--nats", nats_url],
        "notifier": ["--nats", nats_url],
        "gateway": [
            "--nats",
            nats_url,
            "--listen",
            settings.http,
            "--data-dir",
            str(data_dir),
        ],
    }
    specs = []
    for name in ORDER:
        if name not in present:
            continue
        env = {**os.environ, **shared, "AGENTBUS_NATS_URL": nats_url}
        if name in creds:
            env["AGENTBUS_NATS_USER"] = name
            env["AGENTBUS_NATS_PASSWORD"] = creds[name]
        cmd = [sys.executable, "-m", "services.cli", name, *argv[name]]
        specs.append(ServiceSpec(name=name, argv=cmd, env=env))
    return specs


def _banner(settings: LauncherSettings, data_dir: Path, names: list[str]) -> None:
    token = issue(
        load_secret(data_dir, os.environ.get("AGENTBUS_DEVICE_SECRET")), "local"
    )
    url = f"http://{settings.http}"
    print(
        f"\nagentbus is starting: {', '.join(names)}\n"
        f"  App URL:       {url}\n"
        f"  device token:  {token}   (device 'local', 24 h; "
        f"new ones: agentbus token DEVICE --data-dir {data_dir})\n"
        f"  try:  export T={token}\n"
        f'        curl -s -XPOST -H "Authorization: Bearer $T" {url}/v1/sessions\n',
        flush=True,
    )
