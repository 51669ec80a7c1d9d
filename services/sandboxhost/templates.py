"""Local templates: a named read-only layer built once from a short recipe.

A recipe (JSON) lists Debian packages, pip packages and files::

    {"apt": ["sl"], "pip": ["six"], "files": {"etc/motd": "hello\\n"}}

It is built WITHOUT changing the host: ``apt-get download`` + ``dpkg-deb -x``
of the listed packages and of their dependencies the host does not have
(sandboxes already see the host's ``/usr`` read-only), ``pip install --target``
with the sandbox's own Python, then the files. The result lives in
``<data dir>/templates/<name>/layer`` and is bind-mounted READ-ONLY at
``/agentbus/template`` in every sandbox of the template, with its ``bin``
directories first on ``PATH`` and its Python packages on ``PYTHONPATH``.

Recipes: the built-in ``default`` (python3, git, node, build tools,
python-lsp-server) and any ``<data dir>/templates/<name>.json``. ``base`` is
the host's tools only. A layer is built lazily by the first create that needs
it (one build at a time per template) and then reused; changing a recipe
rebuilds it (the recipe's hash is stored beside the layer).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from services.sandboxhost.errors import ControlError
from services.sandboxhost.layers import copy_tree

log = logging.getLogger(__name__)
MOUNT = "/agentbus/template"
PROFILE_D = "/etc/profile.d"
NOBODY = 65534
BUILD_TIMEOUT = 900
DEFAULT_RECIPE: dict[str, Any] = {
    "apt": ["python3", "python3-venv", "git", "nodejs", "build-essential"],
    "pip": ["python-lsp-server"],
    "files": {},
}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_PKG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.:_=<>~!\[\], -]*$")


def env_of(layer: Path, root: str, path: str) -> dict[str, str]:
    """PATH, PYTHONPATH (and library path) of a template layer mounted at ``root``."""
    subs = ["python/bin", "usr/local/bin", "usr/bin", "bin", "usr/games"]
    bins = [f"{root}/{d}" for d in subs if (layer / d).is_dir()]
    env = {"PATH": ":".join([*bins, path])}
    if (layer / "python").is_dir():
        env["PYTHONPATH"] = f"{root}/python"
    libs = ["usr/lib/x86_64-linux-gnu", "usr/lib", "lib/x86_64-linux-gnu"]
    found = [f"{root}/{d}" for d in libs if (layer / d).is_dir()]
    if found:
        env["LD_LIBRARY_PATH"] = ":".join(found)
    return env


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

    def __init__(self, data_dir: Path, python: str) -> None:
        self.root = data_dir / "templates"
        self.root.mkdir(parents=True, exist_ok=True)
        self.python = python
        self._locks: dict[str, asyncio.Lock] = {}

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

    async def layer(self, name: str) -> Path:
        """The built layer of a template (built now if missing or stale)."""
        recipe = self.recipe(name)
        if recipe is None:
            raise ControlError(404, f"template {name} not found")
        digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode())
        want = digest.hexdigest()[:16]
        home = self.root / name
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            stamp = home / "recipe.sha"
            if (home / "layer").is_dir() and _read(stamp) == want:
                return home / "layer"
            log.info("building template %s", name)
            try:
                await asyncio.to_thread(self._build, home, recipe)
            except (OSError, subprocess.SubprocessError) as exc:
                raise ControlError(
                    500, f"template {name}: build failed: {exc}"
                ) from exc
            stamp.write_text(want)
            log.info("template %s built", name)
        return home / "layer"

    def _build(self, home: Path, recipe: dict[str, Any]) -> None:
        work = home / "build"
        shutil.rmtree(work, ignore_errors=True)
        layer = work / "layer"
        layer.mkdir(parents=True)
        if recipe.get("apt"):
            _apt(work, layer, recipe["apt"])
        if recipe.get("pip"):
            _pip(work, layer / "python", recipe["pip"], self.python)
        for rel, text in recipe.get("files", {}).items():
            _write_inside(layer, rel, text)
        _make_readable(layer)
        _profile(work / "profile.d", layer)
        for sub in ("layer", "profile.d"):
            shutil.rmtree(home / sub, ignore_errors=True)
            os.replace(work / sub, home / sub)
        shutil.rmtree(work, ignore_errors=True)


def binds(layer: str) -> tuple[tuple[str, str], ...]:
    """Read-only mounts of a built template: the layer and its login profile."""
    return ((layer, MOUNT), (str(Path(layer).parent / "profile.d"), PROFILE_D))


def _profile(out: Path, layer: Path) -> None:
    """The host's ``/etc/profile.d`` plus the template's PATH (login shells).

    ``bash -l`` (every envd command) resets PATH in ``/etc/profile`` and then
    sources ``/etc/profile.d/*.sh``: the template's directories go there.
    """
    out.mkdir()
    out.chmod(0o755)  # read by the sandbox user through its mount (umask is 077)
    if os.path.isdir(PROFILE_D):
        for entry in sorted(Path(PROFILE_D).glob("*.sh")):
            shutil.copyfile(entry, out / entry.name)
    env = env_of(layer, MOUNT, "$PATH")
    lines = [f'export {k}="{v}"' for k, v in sorted(env.items())]
    (out / "zz-agentbus-template.sh").write_text("\n".join(lines) + "\n")
    for entry in out.iterdir():
        entry.chmod(0o644)


def _write_inside(layer: Path, rel: str, text: str) -> None:
    """Write a recipe file; never through a symlink an unpacked package left."""
    here = layer
    for part in Path(rel).parts:
        here = here / part
        if here.is_symlink():
            raise OSError(f"file {rel!r} would leave the template layer")
    here.parent.mkdir(parents=True, exist_ok=True)
    here.write_text(text)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _unprivileged(path: Path) -> list[str]:
    """Run as nobody (owning ``path``) when we are root: a package can only
    write where nobody may, never through a symlink into the host."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return []
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, NOBODY, NOBODY)
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), NOBODY, NOBODY, follow_symlinks=False)
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def _run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv[:3])}…: {done.stderr.strip()[-800:]}")
    return done.stdout


def _apt(work: Path, layer: Path, packages: list[str]) -> None:
    """Download the packages (and dependencies the host lacks) and unpack them.

    As root, download and unpacking run as nobody in a scratch directory under
    the system temp dir (the data dir's parents may be closed to nobody); the
    unpacked tree is then copied into the layer.
    """
    wanted = _missing(work, _closure(work, packages))
    if not wanted:
        return
    scratch = Path(tempfile.mkdtemp(prefix="agentbus-template-"))
    try:
        debs, tree = scratch / "debs", scratch / "tree"
        debs.mkdir()
        tree.mkdir()
        as_nobody = _unprivileged(scratch)
        _run([*as_nobody, "apt-get", "download", *sorted(wanted)], debs)
        for deb in sorted(debs.glob("*.deb")):
            _run([*as_nobody, "dpkg-deb", "-x", str(deb), str(tree)], scratch)
        copy_tree(tree, layer)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _closure(work: Path, packages: list[str]) -> set[str]:
    """The packages and their recursive hard dependencies (real packages)."""
    out = _run(
        [
            "apt-cache",
            "depends",
            "--recurse",
            "--no-recommends",
            "--no-suggests",
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
            *packages,
        ],
        work,
    )
    names = set(packages)
    for line in out.splitlines():
        line = line.strip()
        if line.startswith(("Depends:", "PreDepends:")):
            dep = line.split(":", 1)[1].strip()
            if not dep.startswith("<"):  # <virtual>
                names.add(dep)
        elif line and not line.startswith(("|", "<")) and ":" not in line:
            names.add(line)
    return names


def _missing(work: Path, names: set[str]) -> set[str]:
    """The packages not installed on this host."""
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\\n", *sorted(names)],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    installed = {
        line.split()[0].split(":")[0]
        for line in out.splitlines()
        if line.endswith(" installed")
    }
    return {n for n in names if n.split(":")[0] not in installed}


def _pip(work: Path, target: Path, packages: list[str], python: str) -> None:
    """pip packages for the sandbox's own Python, into the layer only.

    The host's pip (this venv's) installs for the sandbox's interpreter
    (``--python``), so scripts start with the sandbox's Python.
    """
    argv = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet"]
    argv += ["--no-warn-script-location", "--disable-pip-version-check"]
    # Wheels only: no package's setup code runs (the build may run as root).
    argv += ["--only-binary=:all:", "--root-user-action=ignore"]
    argv += ["--target", str(target), *packages]
    _run(argv, work)


def _make_readable(layer: Path) -> None:
    """Every sandbox user reads the layer; nobody writes it."""
    for dirpath, dirnames, filenames in os.walk(layer):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)  # noqa: S103 - read-only
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                mode = os.stat(path).st_mode
                os.chmod(path, 0o755 if mode & 0o111 else 0o644)
