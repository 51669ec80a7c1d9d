"""Sandbox-host part of bench/lifecycle.py: snapshots, fork, templates (e2b SDK).

On a 1,000-file / 10 MiB workspace: create, pause, resume, snapshot (of a
running sandbox: frozen while its own layer is copied), create from that
snapshot, fork (one child), and create from a non-default template (its layer
built on the first create, reused after).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from e2b import AsyncSandbox

from tests.plugins.sandboxhost import SandboxHostProcess

FILL = (
    "mkdir -p /workspace/data && cd /workspace/data && "
    "for d in 0 1 2 3 4 5 6 7 8 9; do mkdir -p d$d; done && "
    "for i in $(seq 1 1000); do head -c 10485 /dev/urandom > d$((i % 10))/f$i; done"
)
TEMPLATE = {"apt": ["sl"], "files": {"etc/motd": "bench\n"}}


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


async def _timed_create(opts: dict[str, Any], **kw: Any) -> tuple[float, AsyncSandbox]:
    t0 = time.perf_counter()
    sbx = await AsyncSandbox.create(timeout=600, **kw, **opts)
    return _ms(t0), sbx


async def host_bench(host: SandboxHostProcess, repeat: int) -> dict[str, Any]:
    """Samples (ms) of every sandbox-host operation, summarised by the caller."""
    opts = {"api_key": host.api_key, "api_url": host.url, "sandbox_url": host.url}
    out: dict[str, list[float]] = {
        k: []
        for k in (
            "create",
            "pause",
            "resume",
            "snapshot",
            "create_from_snapshot",
            "fork",
            "create_from_template_built",
        )
    }
    ms, src = await _timed_create(opts)
    out["create"].append(ms)
    filled = await src.commands.run(FILL, timeout=600)
    assert filled.exit_code == 0, filled.stderr
    for _ in range(repeat):
        t0 = time.perf_counter()
        snap = await src.create_snapshot()
        out["snapshot"].append(_ms(t0))
        ms, child = await _timed_create(opts, template=snap.snapshot_id)
        out["create_from_snapshot"].append(ms)
        count = await child.commands.run("ls /workspace/data/d0 | wc -l")
        assert count.stdout.strip() == "100", count.stdout
        await child.kill()
        await AsyncSandbox.delete_snapshot(snap.snapshot_id, **opts)
        t0 = time.perf_counter()
        forks = await src.fork()
        out["fork"].append(_ms(t0))
        for f in forks:
            await f.kill()
        t0 = time.perf_counter()
        await src.pause()
        out["pause"].append(_ms(t0))
        t0 = time.perf_counter()
        await AsyncSandbox.connect(src.sandbox_id, **opts)
        out["resume"].append(_ms(t0))
        ms, extra = await _timed_create(opts)
        out["create"].append(ms)
        await extra.kill()
    await src.kill()
    name = f"bench-{os.getpid()}"
    (host.data_dir / "templates" / f"{name}.json").write_text(json.dumps(TEMPLATE))
    first_ms, first = await _timed_create(opts, template=name)
    await first.kill()
    for _ in range(repeat):
        ms, sbx = await _timed_create(opts, template=name)
        out["create_from_template_built"].append(ms)
        await sbx.kill()
    result: dict[str, Any] = {"samples": out, "template_first_create_ms": first_ms}
    result["snapshots"] = host.info().get("snapshots", "unknown")
    return result
