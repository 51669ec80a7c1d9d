"""What isolation costs at sandbox creation, on the local sandbox host.

For each configuration, measures (ms, p50 and max over repetitions) ``create``
(``AsyncSandbox.create`` through the e2b SDK) and ``create→first command``
(create, then ``commands.run("true")`` returns). Configurations: the default
(own network namespace with slirp4netns egress + nftables rules, a disk image
quota), network ``none``, and no disk quota. Prints JSON. Usage:

    .venv/bin/python bench/sandbox_create.py [--repeat N] [--baseline DIR]

Starts its own sandbox hosts on free ports. ``--baseline DIR`` adds a host run
from another checkout (e.g. ``git archive <commit>`` before isolation), measured
in the same run so that both see the same machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2b import AsyncSandbox

from tests.plugins import sandboxhost as plugin
from tests.plugins.sandboxhost import SandboxHostProcess

CONFIGS: dict[str, dict[str, str]] = {
    "default (internet + disk quota)": {},
    "network none": {"AGENTBUS_SANDBOXHOST_NETWORK": "none"},
    "no disk quota": {"AGENTBUS_SANDBOX_DISK_MB": "0"},
}


def summary(samples: list[float]) -> dict[str, float]:
    """p50 / max / n of samples in ms."""
    return {
        "p50_ms": round(statistics.median(samples), 1),
        "max_ms": round(max(samples), 1),
        "n": len(samples),
    }


async def measure(host: SandboxHostProcess, repeat: int) -> dict[str, Any]:
    """create and create→first command on one host."""
    opts = {"api_key": host.api_key, "api_url": host.url, "sandbox_url": host.url}
    create, first = [], []
    warm = await AsyncSandbox.create(timeout=60, **opts)  # templates, imports
    await warm.kill()
    for _ in range(repeat):
        t0 = time.perf_counter()
        sbx = await AsyncSandbox.create(timeout=60, **opts)
        t1 = time.perf_counter()
        await sbx.commands.run("true")
        t2 = time.perf_counter()
        await sbx.kill()
        create.append((t1 - t0) * 1000)
        first.append((t2 - t0) * 1000)
    return {"create": summary(create), "create_to_first_command": summary(first)}


def launcher(tmp: Path, checkout: Path) -> Path:
    """A script that runs ``agentbus`` from ``checkout`` (first on sys.path)."""
    script = tmp / "agentbus-baseline"
    code = (
        f"import sys; sys.path.insert(0, {str(checkout)!r}); "
        "from services.cli import main; sys.exit(main())"
    )
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{code}" "$@"\n')
    script.chmod(0o755)
    return script


async def main(repeat: int, baseline: Path | None) -> dict[str, Any]:
    """Every configuration on its own host."""
    out: dict[str, Any] = {}
    configs = list(CONFIGS.items())
    if baseline is not None:
        configs.insert(0, (f"baseline {baseline}", {}))
    with tempfile.TemporaryDirectory() as tmp:
        default = plugin.AGENTBUS
        for i, (name, env) in enumerate(configs):
            is_base = name.startswith("baseline")
            plugin.AGENTBUS = launcher(Path(tmp), baseline) if is_base else default  # type: ignore[arg-type]
            host = SandboxHostProcess(Path(tmp) / f"host{i}", env={**os.environ, **env})
            host.start()
            try:
                out[name] = await measure(host, repeat)
                out[name]["isolation"] = host.info()["isolation"]
            finally:
                host.stop()
        plugin.AGENTBUS = default
    out["load_average"] = os.getloadavg()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.repeat, args.baseline)), indent=2))
