"""Local templates: a named read-only layer built once from a short recipe.

A recipe (JSON) lists Debian packages, pip packages and files::

    {"apt": ["sl"], "pip": ["six"], "files": {"etc/motd": "hello\\n"}}

It is built by :mod:`template_build` (its own process, bounded and killable)
WITHOUT changing the host. Built layers are cached by the recipe's hash in a
cache shared by every sandbox host of this user
(``AGENTBUS_SANDBOXHOST_TEMPLATE_CACHE``, default
``~/.cache/agentbus/templates``): ``<cache>/<hash>/layer`` and ``profile.d``,
published by one rename, one build at a time across processes (a file lock).
``<data dir>/templates/<name>`` links to the built one. The layer is
bind-mounted READ-ONLY at ``/agentbus/template`` in every sandbox of the
template, with its ``bin`` directories first on ``PATH`` and its Python
packages on ``PYTHONPATH``.

Recipes: the built-in ``default`` (python3, git, node, build tools,
python-lsp-server with pyflakes) and any ``<data dir>/templates/<name>.json``.
``base`` is the host's tools only. A layer is built by the first create that
needs it (or by the host's start, ``AGENTBUS_SANDBOXHOST_PREBUILD``) and then
reused; changing a recipe changes its hash (a new build). A create waits for a
build at most ``wait_s`` (then 503, the build goes on); a failed build is
answered at once with its error for a minute before it is tried again.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from services.sandboxhost.errors import ControlError
from services.sandboxhost.settings import SandboxHostSettings
from services.sandboxhost.template_build import (
    MOUNT,
    PROFILE_D,
    _write_inside,
    env_of,
)

__all__ = ["MOUNT", "PROFILE_D", "Templates", "_write_inside", "binds", "env_of"]
log = logging.getLogger(__name__)
BUILD_TIMEOUT = 900.0
RETRY_AFTER_S = 60.0
DEFAULT_RECIPE: dict[str, Any] = {
    "apt": ["python3", "python3-venv", "git", "nodejs", "build-essential"],
    # pyflakes: pylsp's diagnostics (undefined names, unused imports).
    "pip": ["python-lsp-server[pyflakes]"],
    "files": {},
}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_PKG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.:_=<>~!\[\], -]*$")


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/agentbus/templates`` (``~/.cache`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentbus" / "templates"


def check_recipe(name: str, recipe: Any) -> dict[str, Any]:
    """A validated recipe (clear errors naming the bad field)."""
    if not isinstance(recipe, dict):
        raise ControlError(400, f"template {name}: recipe must be a JSON object")
    unknown = set(recipe) - {"apt", "pip", "files"}
    if unknown:
        raise ControlError(400, f"template {name}: unknown keys {sorted(unknown)}")
    for key in ("apt", "pip"):
        items = recipe.get(key, [])
        if not isinstance(items, list) or not all(
            isinstance(x, str) and _PKG.match(x) for x in items
        ):
            raise ControlError(400, f"template {name}: {key} must be package names")
    files = recipe.get("files", {})
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        raise ControlError(400, f"template {name}: files must map paths to text")
    for path in files:
        parts = Path(path).parts
        if not parts or Path(path).is_absolute() or ".." in parts:
            raise ControlError(400, f"template {name}: bad file path {path!r}")
    return recipe


class Templates:
    """Template recipes of a host and their built layers."""

    def __init__(
        self, data_dir: Path, python: str, settings: SandboxHostSettings
    ) -> None:
        self.root = data_dir / "templates"
        self.root.mkdir(parents=True, exist_ok=True)
        cache = settings.sandboxhost_template_cache
        self.cache = Path(cache).absolute() if cache else default_cache()
        self.wait_s = settings.sandboxhost_template_wait_s
        self.python = python
        self._builds: dict[str, asyncio.Task[Path]] = {}
        self._failed: dict[str, tuple[float, str]] = {}
        self._prebuilds: list[asyncio.Task[Path]] = []

    def recipe(self, name: str) -> dict[str, Any] | None:
        """The recipe of a template, None if there is no such template."""
        if not _NAME.match(name):
            return None
        path = self.root / f"{name}.json"
        if path.exists():
            try:
                raw = json.loads(path.read_text())
            except ValueError as exc:
                raise ControlError(500, f"template {name}: bad recipe: {exc}") from exc
            return check_recipe(name, raw)
        return DEFAULT_RECIPE if name == "default" else None

    def digest(self, recipe: dict[str, Any]) -> str:
        """The cache key: the recipe and the sandbox Python it is built for."""
        raw = json.dumps({"recipe": recipe, "python": self.python}, sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:24]

    async def layer(self, name: str, *, wait: bool = True) -> Path:
        """The built layer of a template (built now if missing).

        Waits at most ``wait_s`` for a build unless told to wait (503 after;
        the build goes on).
        """
        recipe = self.recipe(name)
        if recipe is None:
            raise ControlError(404, f"template {name} not found")
        key = self.digest(recipe)
        failed = self._failed.get(key)
        if failed is not None and time.monotonic() - failed[0] < RETRY_AFTER_S:
            raise ControlError(500, failed[1])
        task = self._builds.get(key)
        if task is None or (task.done() and not _ok(task)):
            task = asyncio.create_task(self._ensure(name, key, recipe))
            task.add_done_callback(_seen)  # a failure nobody waited for is logged
            self._builds[key] = task
        try:
            async with asyncio.timeout(self.wait_s if wait else None):
                return await asyncio.shield(task)
        except TimeoutError:
            raise ControlError(
                503, f"template {name} is still being built; try again shortly"
            ) from None

    def prebuild(self, names: list[str]) -> None:
        """Start building these templates now (failures are logged)."""
        for name in filter(None, (n.strip() for n in names)):
            if self.recipe(name) is None:
                log.warning("prebuild: template %s not found", name)
                continue
            task = asyncio.create_task(self.layer(name, wait=False))
            task.add_done_callback(_seen)  # the build logged its failure
            self._prebuilds.append(task)

    async def close(self) -> None:
        """Stop builds in progress (their processes are killed)."""
        tasks = [*self._builds.values(), *self._prebuilds]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _ensure(self, name: str, key: str, recipe: dict[str, Any]) -> Path:
        built = self.cache / key
        try:
            if not (built / "layer").is_dir():
                self.cache.mkdir(mode=0o700, parents=True, exist_ok=True)
                async with _file_lock(self.cache / f"{key}.lock"):
                    if not (built / "layer").is_dir():
                        await self._build(name, built, recipe)
            self._link(name, built)
        except (OSError, ControlError) as exc:
            message = str(exc)
            if not isinstance(exc, ControlError):
                message = f"template {name}: build failed: {exc}"
            self._failed[key] = (time.monotonic(), message)
            log.error("%s", message)
            raise ControlError(500, message) from exc
        self._failed.pop(key, None)
        return built / "layer"

    async def _build(self, name: str, built: Path, recipe: dict[str, Any]) -> None:
        work = built.with_name(built.name + ".build")
        await asyncio.to_thread(shutil.rmtree, work, True)
        log.info("building template %s (%s)", name, built.name)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.sandboxhost.template_build",
            str(work),
            self.python,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # killed as a group, apt and pip included
        )
        try:
            async with asyncio.timeout(BUILD_TIMEOUT):
                _, err = await proc.communicate(json.dumps(recipe).encode())
        except BaseException:
            _kill_group(proc.pid)
            await proc.wait()
            raise
        if proc.returncode != 0:
            text = err.decode("utf-8", "replace").strip()[-800:]
            raise OSError(f"exit {proc.returncode}: {text}")
        os.replace(work, built)
        log.info("template %s built in %.1f s", name, time.monotonic() - started)

    def _link(self, name: str, built: Path) -> None:
        """``<data dir>/templates/<name>`` -> the built layer (for operators)."""
        link = self.root / name
        if link.exists() and not link.is_symlink():
            return  # a layer built before the cache existed: left alone
        tmp = self.root / f".{name}.link"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(built)
        os.replace(tmp, link)


def _seen(task: asyncio.Task[Path]) -> None:
    if not task.cancelled():
        task.exception()


def _ok(task: asyncio.Task[Path]) -> bool:
    return not task.cancelled() and task.exception() is None


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def _file_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive lock between processes (polled: never blocks the loop)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(0.2)
        yield
    finally:
        os.close(fd)


def binds(layer: str) -> tuple[tuple[str, str], ...]:
    """Read-only mounts of a built template: the layer and its login profile."""
    return ((layer, MOUNT), (str(Path(layer).parent / "profile.d"), PROFILE_D))
