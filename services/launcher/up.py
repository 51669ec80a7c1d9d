"""``agentbus up``: the whole stack on one machine.

Starts an embedded nats-server (JetStream store under the data dir, loopback
only, one generated credential per service) unless ``--nats`` names one, or a
3-node JetStream cluster with ``--nats-cluster 3`` (everything at 3 replicas),
then each service as its own OS process (``--replicas N`` of each). Every
child, nats-server included, is supervised: restarted on a crash, and stopped
by the kernel if ``up`` itself dies. Services missing from this build are not
started. Ctrl-C / SIGTERM stops everything; nothing is left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import logging
import os
import signal
import sys
from pathlib import Path

from eventstore.settings import js_replicas
from services.cli import available, known_env_names
from services.common.lifecycle import install_stop_signals
from services.common.limits import raise_nofile
from services.common.localnats import ADMIN, record_url
from services.common.settings import SettingsError, check_unknown, load_settings
from services.gateway.tokens import issue, load_secret
from services.launcher.natsconf import load_credentials
from services.launcher.natsnodes import (
    NatsNode,
    StoreInUse,
    lock_store,
    plan_nodes,
    write_nodes,
)
from services.launcher.ready import wait_nats_ready
from services.launcher.settings import LauncherSettings
from services.launcher.state import snapshot, write_state
from services.launcher.supervisor import ServiceSpec, Supervisor
from services.sandboxhost.service import api_key
from services.sandboxhost.settings import SandboxHostSettings

log = logging.getLogger("agentbus.up")

# Start order: the hands first, the App's door last.
ORDER = ("sandboxhost", "projector", "broker", "pool", "gateway", "notifier")
# Run ``--replicas N`` times (gateways share one port through SO_REUSEPORT).
REPLICATED = frozenset({"gateway", "pool", "broker", "projector", "notifier"})


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
    p.add_argument(
        "--nats-cluster",
        dest="nats_cluster",
        type=int,
        choices=[1, 3],
        help="embedded NATS nodes: 1, or 3 (a JetStream cluster, 3 replicas)",
    )
    p.add_argument(
        "--replicas",
        type=int,
        help="processes of each of gateway, pool, broker, projector",
    )
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
        _check_cluster(settings)
    except SettingsError as exc:
        print(f"agentbus up: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(run(settings))


def _check_cluster(settings: LauncherSettings) -> None:
    """1 or 3 nodes; more replicas than embedded nodes can never be placed."""
    if settings.nats_cluster not in (1, 3):
        raise SettingsError("AGENTBUS_NATS_CLUSTER", "must be 1 or 3")
    try:
        replicas = js_replicas()
    except ValueError as exc:
        raise SettingsError("AGENTBUS_JS_REPLICAS", str(exc)) from exc
    if not settings.nats_url and replicas > settings.nats_cluster:
        raise SettingsError(
            "AGENTBUS_JS_REPLICAS",
            f"{replicas} replicas need --nats-cluster 3 (embedded nodes: "
            f"{settings.nats_cluster})",
        )


async def run(settings: LauncherSettings, stop: asyncio.Event | None = None) -> int:
    """Start NATS and the services; return once stopped (1: data dir in use)."""
    stop = stop or asyncio.Event()
    install_stop_signals(stop)
    soft, _ = raise_nofile()  # inherited by NATS and every service
    log.info("open-file limit: %d", soft)
    data_dir = Path(settings.data_dir).resolve()  # noqa: ASYNC240 - start-up only
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        held = _lock_data_dir(data_dir)
        nodes, creds, fds = _prepare_nats(settings, data_dir)
    except StoreInUse as exc:
        print(f"agentbus up: {exc}", file=sys.stderr)
        return 1
    nats_url = ",".join(n.url for n in nodes) or str(settings.nats_url)
    supervisor = Supervisor(
        settings.restart_backoff_s,
        settings.restart_backoff_max_s,
        healthy_s=settings.restart_healthy_s,
        on_change=lambda: write_state(
            data_dir, snapshot(nodes, nats_url, supervisor.specs)
        ),
    )
    try:
        await _start_nats(supervisor, nodes, fds, creds, stop)
        if not stop.is_set():
            _start_services(supervisor, settings, data_dir, nats_url, creds, nodes)
        await stop.wait()
    finally:
        log.info("stopping")
        names = {n.name for n in nodes}
        services = [s.name for s in supervisor.specs if s.name not in names]
        await supervisor.stop_only(services)
        await supervisor.stop_only(list(names))
        for fd in (*fds, held):
            os.close(fd)
        log.info("stopped")
    return 0


def _lock_data_dir(data_dir: Path) -> int:
    """One ``up`` per data dir (also with ``--nats``, where there is no store)."""
    fd = os.open(data_dir / "up.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreInUse(
            f"the data dir {data_dir} is in use by another `agentbus up` "
            f"(see `agentbus status --data-dir {data_dir}`)"
        ) from None
    return fd


def _prepare_nats(
    settings: LauncherSettings, data_dir: Path
) -> tuple[list[NatsNode], dict[str, str], list[int]]:
    """Plan, configure and lock the embedded nodes (none with ``--nats``)."""
    if settings.nats_url:
        return [], {}, []
    nats_dir = data_dir / "nats"
    creds = load_credentials(nats_dir)
    nodes = plan_nodes(nats_dir, settings.nats_cluster, settings.nats_port)
    prefix = os.environ.get("AGENTBUS_BUS_PREFIX", "agentbus")
    write_nodes(nodes, creds, nats_dir, prefix)
    fds: list[int] = []
    try:
        for node in nodes:
            fds.append(lock_store(node))
    except StoreInUse:
        for fd in fds:
            os.close(fd)
        raise
    record_url(nats_dir, ",".join(n.url for n in nodes))
    return nodes, creds, fds


async def _start_nats(
    supervisor: Supervisor,
    nodes: list[NatsNode],
    fds: list[int],
    creds: dict[str, str],
    stop: asyncio.Event,
) -> None:
    """Start every node under supervision and wait until JetStream answers."""
    for node, fd in zip(nodes, fds, strict=True):
        supervisor.start(
            ServiceSpec(
                name=node.name,
                argv=node.argv(),
                env={},
                pass_fds=(fd,),
                death_signal=signal.SIGTERM,
            )
        )
    if nodes:
        urls = [n.url for n in nodes]
        await wait_nats_ready(urls, ADMIN, creds[ADMIN], stop)
        kind = "cluster of 3" if len(nodes) > 1 else "nats-server"
        where = nodes[0].store.parent
        log.info("%s on %s (JetStream under %s)", kind, ",".join(urls), where)


def _start_services(
    supervisor: Supervisor,
    settings: LauncherSettings,
    data_dir: Path,
    nats_url: str,
    creds: dict[str, str],
    nodes: list[NatsNode],
) -> None:
    specs = _specs(settings, data_dir, nats_url, creds)
    if len(nodes) > 1:
        for spec in specs:
            spec.env = {**spec.env, "AGENTBUS_JS_REPLICAS": "3"}
    _banner(settings, data_dir, [s.name for s in specs])
    for spec in specs:
        supervisor.start(spec)


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
        for instance in _instances(name, settings.replicas):
            extra = _replica_env(name, instance, settings.replicas)
            spec = ServiceSpec(name=instance, argv=cmd, env={**env, **extra})
            if name == "sandboxhost":
                spec.death_signal = signal.SIGTERM
            specs.append(spec)
    return specs


def _replica_env(name: str, instance: str, replicas: int) -> dict[str, str]:
    """Per-replica variables: the broker's id; gateways share one port (N > 1)."""
    if name == "broker":
        return {"AGENTBUS_BROKER_REPLICA_ID": instance}
    if name == "gateway" and replicas > 1:
        # Safe to share: sandboxes live in their own network namespaces, so no
        # sandbox can join the port group (see docs/architecture.md, gateway).
        return {"AGENTBUS_GATEWAY_REUSE_PORT": "1"}
    return {}


def _instances(name: str, replicas: int) -> list[str]:
    """``gateway`` alone, or ``gateway-1`` … ``gateway-N`` (the sandbox host: one)."""
    if name not in REPLICATED or replicas <= 1:
        return [name]
    return [f"{name}-{i}" for i in range(1, replicas + 1)]


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
