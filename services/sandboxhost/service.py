"""The sandbox host process: one aiohttp listener for control plane and envd."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
from pathlib import Path

from aiohttp import web

from services.common.listen import split_listen
from services.sandboxhost import proxy, quota, restore
from services.sandboxhost.cgroups import CgroupLayout, detect_layout
from services.sandboxhost.control import ControlRoutes
from services.sandboxhost.envd_routes import EnvdRoutes
from services.sandboxhost.errors import SandboxHostError
from services.sandboxhost.host import SandboxHost
from services.sandboxhost.jail import JailSpec, bwrap_works
from services.sandboxhost.records import write_private
from services.sandboxhost.settings import SandboxHostSettings

log = logging.getLogger(__name__)
LISTEN_FILE = "listen"
KEY_FILE = "api_key"
BANNER = (
    "\n" + "!" * 72 + "\n"
    "!! SANDBOXES ARE NOT ISOLATED: bubblewrap is unavailable (or disabled).\n"
    "!! Code in a sandbox runs as this user with full access to this machine.\n"
    "!! Install bubblewrap (apt-get install bubblewrap) for isolation.\n" + "!" * 72
)


def api_key(settings: SandboxHostSettings, data_dir: Path) -> str:
    """The configured key, else the one stored in the data dir (generated once)."""
    if settings.sandboxhost_api_key:
        return settings.sandboxhost_api_key
    path = data_dir / KEY_FILE
    if path.exists():
        return path.read_text().strip()
    key = "e2b_" + secrets.token_hex(20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key


def jail_spec(settings: SandboxHostSettings, data_dir: Path) -> JailSpec:
    """Decide the isolation of this host (loudly when there is none)."""
    mode = settings.sandboxhost_isolation
    if mode not in ("auto", "bwrap", "none"):
        raise SandboxHostError(f"isolation must be auto, bwrap or none, not {mode!r}")
    works = mode != "none" and bwrap_works(settings.sandboxhost_bwrap)
    if mode == "bwrap" and not works:
        raise SandboxHostError(
            f"bubblewrap ({settings.sandboxhost_bwrap}) does not work here"
        )
    isolation = "bwrap" if works else "none"
    python = settings.sandboxhost_python
    if isolation == "none":
        log.critical(BANNER)
        python = (
            python if os.path.exists(python) else (shutil.which("python3") or python)
        )
    root = os.geteuid() == 0
    return JailSpec(
        disk_templates=disk_templates(settings, data_dir, isolation),
        isolation=isolation,
        bwrap=settings.sandboxhost_bwrap,
        python=python,
        uid=settings.sandboxhost_uid if root and isolation == "bwrap" else None,
        gid=settings.sandboxhost_gid if root and isolation == "bwrap" else None,
    )


def disk_templates(
    settings: SandboxHostSettings, data_dir: Path, isolation: str
) -> str | None:
    """Where quota images come from, or None (loudly) when disks are unlimited."""
    if settings.sandbox_disk_mb <= 0:
        log.warning("AGENTBUS_SANDBOX_DISK_MB=0: sandbox disks are not limited")
        return None
    why = quota.unavailable_reason() if isolation == "bwrap" else "no isolation"
    if why is not None:
        log.critical("SANDBOX DISKS ARE NOT LIMITED: %s", why)
        return None
    return str(data_dir / "disk-templates")


def prepare_data_dir(settings: SandboxHostSettings) -> Path:
    """Create the data dir: owner only (0700), like every dir and file in it."""
    data_dir = Path(settings.sandboxhost_data_dir).absolute()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    # Files the host creates later (logs, images, records) default to 0600/0700.
    os.umask(0o077)
    return data_dir


def build_app(host: SandboxHost, key: str) -> web.Application:
    """The aiohttp application (no collisions between control and envd paths)."""
    app = web.Application(
        client_max_size=64 * 1024 * 1024,
        # Outermost first: a restoring sandbox is waited for before it is served.
        middlewares=[restore.middleware(host, key), proxy.middleware(host)],
    )
    ControlRoutes(host, key).add_to(app)
    EnvdRoutes(host).add_to(app)
    return app


async def run(settings: SandboxHostSettings, stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set; sandboxes' processes end with the host."""
    stop = stop or asyncio.Event()
    data_dir = await asyncio.to_thread(prepare_data_dir, settings)
    key = api_key(settings, data_dir)
    spec = await asyncio.to_thread(jail_spec, settings, data_dir)
    layout = CgroupLayout("none")
    if settings.sandboxhost_cgroups != "off":
        layout = await asyncio.to_thread(detect_layout)
    host = SandboxHost(settings, data_dir, spec, layout)
    log.info(
        "isolation=%s cgroups=%s data_dir=%s", spec.isolation, layout.kind, data_dir
    )
    async with contextlib.AsyncExitStack() as stack:
        to_boot = await restore.load(host)  # records only: cheap
        host.templates.prebuild(settings.sandboxhost_prebuild.split(","))
        runner = web.AppRunner(
            build_app(host, key), access_log=None, shutdown_timeout=2.0
        )
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        # Runs before the runner's cleanup: ends every process stream first.
        stack.push_async_callback(host.close)
        bind_host, port = split_listen(settings.sandboxhost_listen)
        site = web.TCPSite(runner, bind_host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        actual = sockets[0].getsockname()[1] if sockets else port
        url = f"http://{bind_host}:{actual}"
        write_private(data_dir / LISTEN_FILE, (url + "\n").encode())
        log.info("sandbox host listening on %s", url)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(host.enforce_timeouts(stop))
            booting = tg.create_task(restore.boot_all(host, to_boot))
            await stop.wait()
            booting.cancel()
    log.info("sandbox host stopped")
