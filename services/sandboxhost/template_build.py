"""Building one template layer: run as its own process by :mod:`templates`.

``python -m services.sandboxhost.template_build OUT PYTHON`` reads a checked
recipe (JSON) on stdin and builds ``OUT/layer`` and ``OUT/profile.d``. It is a
separate process so that a build can be bounded and killed as a whole (with
the apt and pip processes under it) when it takes too long or its host stops.

The build does not change the host: ``apt-get download`` + ``dpkg-deb -x`` of
the listed packages and of their dependencies the host does not have
(sandboxes already see the host's ``/usr`` read-only), ``pip install --target``
with the sandbox's own Python, then the files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from services.sandboxhost.layers import copy_tree

MOUNT = "/agentbus/template"
PROFILE_D = "/etc/profile.d"
NOBODY = 65534
STEP_TIMEOUT = 900


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


def build(out: Path, recipe: dict[str, Any], python: str) -> None:
    """``out/layer`` and ``out/profile.d`` from a checked recipe."""
    layer = out / "layer"
    layer.mkdir(parents=True)
    if recipe.get("apt"):
        _apt(out, layer, recipe["apt"])
    if recipe.get("pip"):
        _pip(out, layer / "python", recipe["pip"], python)
    for rel, text in recipe.get("files", {}).items():
        _write_inside(layer, rel, text)
    _make_readable(layer)
    _profile(out / "profile.d", layer)


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
        timeout=STEP_TIMEOUT,
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


def main(argv: list[str]) -> int:
    """Build into ``argv[0]`` for the Python ``argv[1]``; the recipe on stdin."""
    out, python = Path(argv[0]), argv[1]
    try:
        build(out, json.loads(sys.stdin.read()), python)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
