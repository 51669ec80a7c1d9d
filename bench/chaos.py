"""Chaos run: SIGKILL each part of a live `agentbus up` under load (prints JSON).

``--sessions`` sessions (20), each with one SSE reader resuming with
Last-Event-ID and a driver sending scripted prompts (say, write, read, short
bash) with a ``client_msg_id``, retried with the same id until accepted. Then,
one at a time with recovery in between, SIGKILL: the NATS node leading the log
stream, another NATS node (R3 only), a worker, the pool, the broker, the
broker mid-create (a new session's sandbox create held by the sandbox host's
fault injection, the broker killed while it waits), the gateway, the
projector, the sandbox host, and `agentbus up` itself (started again on the
same data dir). Per fault: events lost / duplicated at the
readers, prompts unanswered after 60 s, `worker_lost` turns, failed tool
calls, seconds to the first clean turn and until every session had one. At the
end: every session's audit (log and projector copy), orphan sandboxes after
the sessions are deleted, and processes left behind after `up` stops.

    python bench/chaos.py --nats-cluster 3          # R3
    python bench/chaos.py --faults gateway,pool     # a subset
    python bench/chaos.py --faults none,none        # the load alone, no fault
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bench.chaoslib import Reader, UpStack, descendants, pid_alive

FAULTS = (
    "nats_log_leader",
    "nats_other",
    "worker",
    "pool",
    "broker",
    "broker_create",
    "gateway",
    "projector",
    "sandboxhost",
    "up",
)
# Not a fault: the same measurement with nothing killed (the load's own counts).
BASELINE = "none"
SCRIPT = json.dumps(
    {
        "script": [
            {"say": "hello"},
            {"tool": "write", "args": {"path": "n.txt", "content": "chaos\n"}},
            {"tool": "read", "args": {"path": "n.txt"}},
            {"tool": "bash", "args": {"command": "echo ok", "timeout_s": 20}},
            {"say": "done"},
        ]
    }
)
UNANSWERED_S = 60.0


class Driver:
    """One session: its reader and a prompt loop."""

    def __init__(self, stack: UpStack, http: aiohttp.ClientSession, sid: str) -> None:
        self.stack = stack
        self.http = http
        self.sid = sid
        self.reader = Reader(stack, http, sid)
        self.sent = 0
        self.unanswered = 0
        self.unanswered_turns: list[str] = []
        self.prompt_errors = 0

    async def prompts(self, stop: asyncio.Event) -> None:
        """Prompt after prompt until ``stop`` (the turn in flight is waited out)."""
        while not stop.is_set():
            await self.one_prompt(stop)

    async def one_prompt(self, stop: asyncio.Event) -> None:
        self.sent += 1
        msg_id = f"{self.sid}-{self.sent}"
        turn_id = await self.post(msg_id, stop)
        if turn_id is None:
            return
        try:
            await asyncio.wait_for(self.reader.ended(turn_id), UNANSWERED_S)
        except TimeoutError:
            self.unanswered += 1
            self.unanswered_turns.append(turn_id)

    async def post(self, msg_id: str, stop: asyncio.Event) -> str | None:
        deadline = time.monotonic() + UNANSWERED_S
        body = {"text": SCRIPT, "client_msg_id": msg_id}
        while time.monotonic() < deadline and not stop.is_set():
            try:
                async with self.http.post(
                    self.stack.url(f"/v1/sessions/{self.sid}/prompt"),
                    json=body,
                    headers=self.stack.auth,
                ) as r:
                    if r.status == 202:
                        return str((await r.json())["turn_id"])
                    self.prompt_errors += 1
            except (TimeoutError, aiohttp.ClientError, OSError):
                self.prompt_errors += 1
            await asyncio.sleep(0.25)  # retry pacing, same client_msg_id
        if not stop.is_set():
            self.unanswered += 1
        return None

    def counts(self) -> dict[str, int]:
        return {
            "lost": self.reader.lost,
            "duplicated": self.reader.duplicated,
            "unanswered": self.unanswered,
            "worker_lost": self.reader.stops.get("worker_lost", 0),
            "failed_tool_calls": self.reader.failed_tools,
        }


def _sum(drivers: list[Driver]) -> dict[str, int]:
    total: dict[str, int] = {}
    for d in drivers:
        for k, v in d.counts().items():
            total[k] = total.get(k, 0) + v
    return total


async def recovery(drivers: list[Driver], since: float, limit: float) -> dict[str, Any]:
    """Seconds from ``since`` to the first clean turn, and until all had one."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        firsts = [d.reader.first_clean_after(since) for d in drivers]
        if all(f is not None for f in firsts):
            break
        await asyncio.sleep(0.1)
    firsts = [d.reader.first_clean_after(since) for d in drivers]
    done = [f - since for f in firsts if f is not None]
    return {
        "first_clean_turn_s": round(min(done), 2) if done else None,
        "all_sessions_clean_s": round(max(done), 2)
        if len(done) == len(drivers)
        else None,
        "sessions_recovered": len(done),
    }


# How long the sandbox host holds a create for the mid-create broker kill.
HOLD_CREATE_MS = 8000


class Load:
    """The drivers and their tasks; a fault may add a session (mid-create)."""

    def __init__(self, stack: UpStack, http: aiohttp.ClientSession) -> None:
        self.stack, self.http = stack, http
        self.drivers: list[Driver] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.readers: list[asyncio.Task[None]] = []
        self.stop = asyncio.Event()
        self.no_more = asyncio.Event()

    async def add(self) -> Driver:
        driver = Driver(self.stack, self.http, await self.stack.session(self.http))
        self.drivers.append(driver)
        self.readers.append(asyncio.create_task(driver.reader.run(self.stop)))
        self.tasks.append(asyncio.create_task(driver.prompts(self.no_more)))
        return driver


async def mid_create(stack: UpStack, load: Load) -> str | None:
    """SIGKILL the broker while a new session's sandbox create is held."""
    await stack.faults(load.http, {"delay_ms": {"create": HOLD_CREATE_MS}})
    try:
        driver = await load.add()
        await asyncio.wait_for(driver.reader.creating.wait(), UNANSWERED_S)
        pid, what = await stack.victim("broker")
        if pid is None:
            return None
        os.kill(pid, signal.SIGKILL)
    except TimeoutError:
        return None
    finally:
        await stack.faults(load.http, {"delay_ms": {"create": 0}})
    return f"{what} (mid-create of {driver.sid})"


async def inject(stack: UpStack, load: Load, fault: str) -> str | None:
    """SIGKILL the part named ``fault``; returns what was killed (None: n/a)."""
    if fault == BASELINE:
        return "nothing"
    if fault == "up":
        await stack.kill_up_and_restart()
        return "up"
    if fault == "broker_create":
        return await mid_create(stack, load)
    pid, what = await stack.victim(fault)
    if pid is None:
        return None
    os.kill(pid, signal.SIGKILL)
    return what


async def faults(
    args: argparse.Namespace, stack: UpStack, load: Load
) -> dict[str, Any]:
    """Each fault in turn, with its counts and recovery times."""
    out: dict[str, Any] = {}
    for fault in args.faults:
        before = _sum(load.drivers)
        t0 = time.monotonic()
        killed = await inject(stack, load, fault)
        if killed is None:
            out[fault] = {"skipped": "not applicable"}
            continue
        rec = await recovery(load.drivers, t0, args.recovery_limit_s)
        await asyncio.sleep(args.settle_s)  # let in-flight turns finish
        after = _sum(load.drivers)
        counts = {k: after[k] - before.get(k, 0) for k in after}
        out[fault] = {"killed": killed, **counts, **rec}
    return out


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    stack = UpStack(workdir, args.nats_cluster, args.workers)
    await stack.start()
    result: dict[str, Any] = {
        "replicas": 3 if args.nats_cluster == 3 else 1,
        "sessions": args.sessions,
    }
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        load = Load(stack, http)
        for _ in range(args.sessions):
            await load.add()
        _phase("warm = await recover")
        result["warmup"] = await recovery(load.drivers, time.monotonic() - 1, 120)
        result["faults"] = await faults(args, stack, load)
        _phase("no_more.set()")
        load.no_more.set()
        await asyncio.wait(load.tasks, timeout=UNANSWERED_S + 5)
        load.stop.set()
        await asyncio.wait(load.readers, timeout=10)
        drivers = load.drivers
        sids = [d.sid for d in drivers]
        result["prompts"] = sum(d.sent for d in drivers)
        result["totals"] = _sum(drivers)
        result["unanswered_turns"] = {
            d.sid: d.unanswered_turns for d in drivers if d.unanswered_turns
        }
        _phase('result["audit"] =')
        result["audit"] = await stack.audit(sids)
        _phase('result["orphan_sandb')
        result["orphan_sandboxes"] = await stack.delete_and_count_orphans(http, sids)
    _phase('result["leftover_pro')
    result["leftover_processes"] = await stack.stop_and_count_leftovers()
    return result


_T0 = time.monotonic()


def _phase(name: str) -> None:
    if os.environ.get("CHAOS_PHASES"):
        print(f"{time.monotonic() - _T0:7.1f}s {name}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--nats-cluster", type=int, choices=[1, 3], default=1)
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--recovery-limit-s", type=float, default=60.0)
    p.add_argument("--settle-s", type=float, default=3.0)
    p.add_argument("--workdir", help="keep data and logs here (default: a temp dir)")
    args = p.parse_args(argv)
    args.faults = [f for f in args.faults.split(",") if f]
    unknown = set(args.faults) - {*FAULTS, BASELINE}
    if unknown:
        p.error(f"unknown faults: {sorted(unknown)}")
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        print(json.dumps(asyncio.run(run(args, Path(args.workdir))), indent=1))
        return 0
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        print(json.dumps(asyncio.run(run(args, Path(tmp))), indent=1))
    return 0


__all__ = ["FAULTS", "descendants", "pid_alive", "run"]

if __name__ == "__main__":
    sys.exit(main())
