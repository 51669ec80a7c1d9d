"""Sandbox host restart: time to listening and to every sandbox restored.

Creates N running sandboxes on a real sandbox host, SIGKILLs the host, starts
it again on the same data dir and measures (seconds from the new process's
start): ``listening_s`` (``/health`` answers), ``first_sandbox_s`` (the
control plane answers for the most recently active sandbox), ``all_restored_s``
(``/admin/info`` lists nothing restoring; a host that restores before it
listens has nothing to list) and ``all_commands_s`` (a command ran in every
sandbox). Prints JSON. Usage:

    .venv/bin/python bench/restore.py [--sandboxes 20] [--concurrency 4]

Run the code of another checkout (the "before") with ``PYTHONPATH=<checkout>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2b import AsyncSandbox

from tests.plugins.sandboxhost import SandboxHostProcess
from tests.support.sandboxhost import control, opts

POLL_S = 0.01


def restoring(host: SandboxHostProcess) -> list[str]:
    """Ids still restoring (absent on hosts that restore before listening)."""
    ids: list[str] = host.info().get("restoring", [])
    return ids


async def until(probe: Any, start: float, limit: float = 300.0) -> float:
    """Seconds from ``start`` until ``probe()`` is truthy."""
    while not await asyncio.to_thread(probe):
        if time.monotonic() - start > limit:
            raise TimeoutError("gave up waiting")
        await asyncio.sleep(POLL_S)
    return round(time.monotonic() - start, 3)


async def restart(host: SandboxHostProcess, ids: list[str]) -> dict[str, Any]:
    """SIGKILL and start again; the timings of the restart."""
    host.kill()
    start = time.monotonic()
    await asyncio.to_thread(host.start, 300.0)
    listening = round(time.monotonic() - start, 3)
    newest = ids[-1]  # refreshed last: the most recently active
    first = await until(
        lambda: control(host, "GET", f"/sandboxes/{newest}")[0] == 200, start
    )
    restored = await until(lambda: not restoring(host), start)

    async def run(sid: str) -> None:
        sbx = await AsyncSandbox.connect(sid, **opts(host))
        await sbx.commands.run("true", timeout=60)

    await asyncio.gather(*(run(sid) for sid in ids))
    return {
        "listening_s": listening,
        "first_sandbox_s": first,
        "all_restored_s": restored,
        "all_commands_s": round(time.monotonic() - start, 3),
    }


async def main(n: int, concurrency: int) -> dict[str, Any]:
    env = {**os.environ, "AGENTBUS_SANDBOXHOST_RESTORE_CONCURRENCY": str(concurrency)}
    if "PYTHONPATH" in os.environ:  # an older checkout: the setting is unknown
        env.pop("AGENTBUS_SANDBOXHOST_RESTORE_CONCURRENCY")
    with tempfile.TemporaryDirectory() as tmp:
        host = SandboxHostProcess(Path(tmp) / "data", env=env)
        host.start()
        try:
            ids = []
            for i in range(n):
                sbx = await AsyncSandbox.create(timeout=600 + i, **opts(host))
                ids.append(sbx.sandbox_id)
            result = await restart(host, ids)
        finally:
            host.stop()
    code = os.environ.get("PYTHONPATH") or "this checkout"
    return {"sandboxes": n, "concurrency": concurrency, "code": code, **result}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sandboxes", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.sandboxes, args.concurrency)), indent=2))
