"""``agentbus status --data-dir D [--json]``: what ``agentbus up`` runs, and how it is.

Reads the state ``up`` records (``<data dir>/up.json``), checks each pid, and
asks JetStream (as the local admin user) for every stream and bucket: replicas,
leader node, and the largest lag of a follower.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import nats
from nats.errors import Error as NatsError

from services.common.localnats import find_local_nats
from services.launcher.state import read_state


def parse(argv: list[str]) -> argparse.Namespace:
    """Flags of ``agentbus status``."""
    p = argparse.ArgumentParser(prog="agentbus status", description=__doc__)
    p.add_argument("--data-dir", default=".agentbus", help="data dir of `agentbus up`")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--timeout", type=float, default=3.0, help="NATS timeout (s)")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    """Entry point: 0 if up runs and every part is alive, 1 otherwise."""
    args = parse(argv)
    data_dir = Path(args.data_dir).resolve()
    state = read_state(data_dir)
    if state is None:
        print(f"agentbus status: no `agentbus up` state in {data_dir}", file=sys.stderr)
        return 2
    report = asyncio.run(collect(data_dir, state, args.timeout))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(render(report))
    return 0 if healthy(report) else 1


async def collect(
    data_dir: Path, state: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """The report: ``up``, ``nats``, ``streams``, ``services`` (and ``error``)."""
    report: dict[str, Any] = {
        "up": {"pid": state.get("pid"), "alive": pid_alive(state.get("pid"))},
        "nats": [_with_alive(n) for n in state.get("nats", [])],
        "streams": [],
        "services": [_with_alive(s) for s in state.get("services", [])],
    }
    try:
        report["streams"] = await streams(data_dir, state, timeout_s)
    except (OSError, NatsError, TimeoutError) as exc:
        report["error"] = f"NATS: {exc!r}"
    return report


async def streams(
    data_dir: Path, state: dict[str, Any], timeout_s: float
) -> list[dict[str, Any]]:
    """Every stream, KV bucket and object store with its replicas and leader."""
    local = find_local_nats(data_dir)
    url = str(state.get("nats_url") or (local.url if local else ""))
    if not url:
        raise OSError("no NATS URL recorded")
    nc = await nats.connect(
        [u for u in url.split(",") if u],
        user=local.user if local else None,
        password=local.password if local else None,
        connect_timeout=timeout_s,
        allow_reconnect=False,
        max_reconnect_attempts=0,
        error_cb=_quiet,
    )
    try:
        infos = await nc.jetstream(timeout=timeout_s).streams_info()
    finally:
        await nc.close()
    nodes = state.get("nats", [])
    # A lone server reports no cluster info: it leads everything it has.
    alone = nodes[0]["name"] if len(nodes) == 1 else None
    entries = [_stream_entry(i, alone) for i in infos]
    return sorted(entries, key=lambda e: e["name"])


async def _quiet(exc: Exception) -> None:
    return None


def _stream_entry(info: Any, alone: str | None) -> dict[str, Any]:
    name = str(info.config.name)
    kind = "stream"
    if name.startswith("KV_"):
        kind = "kv"
    elif name.startswith("OBJ_"):
        kind = "object store"
    cluster = info.cluster
    peers = (cluster.replicas or []) if cluster else []
    lags = [p.lag or 0 for p in peers]
    return {
        "name": name,
        "kind": kind,
        "replicas": info.config.num_replicas or 1,
        "leader": (cluster.leader if cluster else None) or alone,
        "followers": [
            {"name": p.name, "current": bool(p.current), "lag": p.lag or 0}
            for p in peers
        ],
        "lag": max(lags, default=0),
        "messages": info.state.messages,
    }


def pid_alive(pid: object) -> bool:
    """True if ``pid`` is a live (not zombie) process."""
    if not isinstance(pid, int):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(") ", 1)[1][:1] not in {"Z", "X"}


def _with_alive(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "alive": pid_alive(entry.get("pid"))}


def healthy(report: dict[str, Any]) -> bool:
    """``up`` and every node and service alive, NATS reachable."""
    parts = [report["up"], *report["nats"], *report["services"]]
    return "error" not in report and all(p["alive"] for p in parts)


def render(report: dict[str, Any]) -> str:
    """A plain-text view of the report."""
    up = report["up"]
    lines = [f"up: pid {up['pid']} {'alive' if up['alive'] else 'DEAD'}", "nats:"]
    for n in report["nats"]:
        lines.append(f"  {n['name']:<10} pid {n['pid']:<8} {_alive(n)}  {n['url']}")
    lines.append("streams:")
    for s in report["streams"]:
        lines.append(
            f"  {s['name']:<32} R{s['replicas']} leader {s['leader']} "
            f"lag {s['lag']} msgs {s['messages']}"
        )
    if "error" in report:
        lines.append(f"  {report['error']}")
    lines.append("services:")
    for s in report["services"]:
        lines.append(
            f"  {s['name']:<12} pid {s['pid']:<8} {_alive(s)}  restarts {s['restarts']}"
        )
    return "\n".join(lines)


def _alive(entry: dict[str, Any]) -> str:
    return "alive" if entry["alive"] else "DEAD"
