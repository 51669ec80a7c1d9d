"""A simulated day of N sessions against the real services, on an accelerated clock.

Starts a private nats-server and sandbox host, a broker (in-process, its
lifecycle clock = the simulated clock, so T2/T3 run on simulated time) and a
warm pool (in-process, real worker processes; T1 is asyncio time there, so it
is scaled by the speed-up). Sessions arrive through the day, send bursts of
prompts (each runs a bash tool in the sandbox) with think times, go idle for
minutes to days, and a share never returns. Each prompt's felt resume (real ms
from the prompt's append to its first tool result) is bucketed by the
sandbox's state when the prompt was sent.

At the end the real ``sandbox.usage`` / ``turn.ended`` events of every session
are folded with the gateway's fold and price table and compared with plan A
(one sandbox always running per session from arrival). The T2/T3 sweep and the
single-timeout policies replay the recorded activity of this run through the
same timer rules (``bench/daysweep.py``); its row for the run's own timers is
checked against the measured cost (``replay_vs_measured``). Prints JSON and
writes ``docs/day.png``. Usage:

    .venv/bin/python bench/day.py [--sessions N] [--real-s S] [--seed K]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import secrets
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
from nats.aio.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.daysweep import Activity, chart, replay, sweep, timeline
from eventstore.log import JetStreamLog
from eventstore.settings import EventStoreSettings
from eventstore.streams import ensure_log_stream
from schemas.events import SessionCreated, UserPrompt
from schemas.ids import new_id
from schemas.names import BusNames
from services.broker.feed import follow_log
from services.broker.machine import BILLED
from services.broker.service import Broker
from services.broker.settings import BrokerSettings
from services.common.natsserver import NatsServerProcess
from services.gateway.prices import PriceTable, price_table
from services.gateway.settings import GatewaySettings
from services.gateway.usage_fold import UsageFold, add_up
from services.pool.service import run as run_pool
from services.pool.settings import PoolSettings
from tests.plugins.sandboxhost import SandboxHostProcess

DAY_S = 86400.0
T1_S, T2_S, T3_S = 600.0, 600.0, 3600.0
NEVER_RETURN = 0.25
COMMAND = "echo $RANDOM >> /workspace/notes.txt && wc -c < /workspace/notes.txt"


class SimClock:
    """Simulated unix seconds: ``start`` + real elapsed time x ``speed``."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.start = time.time()
        self._m0 = time.monotonic()

    def now(self) -> float:
        return self.start + (time.monotonic() - self._m0) * self.speed

    async def until(self, sim_t: float) -> None:
        """Sleep until the simulated time ``sim_t``."""
        await asyncio.sleep(max(0.0, (sim_t - self.now()) / self.speed))


@dataclass
class Plan:
    """One session's day: when it arrives, its visits (prompts per visit), gaps."""

    arrive: float
    visits: list[tuple[float, int]]  # (offset from arrival, prompts)


@dataclass
class Results:
    """What the drivers measured."""

    resume_ms: dict[str, list[float]] = field(default_factory=dict)
    agent_ms: dict[str, list[float]] = field(default_factory=dict)
    activity: dict[str, list[Activity]] = field(default_factory=dict)
    arrivals: dict[str, float] = field(default_factory=dict)
    failed_turns: int = 0


def plan_day(n: int, rng: random.Random) -> list[Plan]:
    """Arrivals through the day (busier by day), bursts, log-uniform idle gaps."""
    plans = []
    for _ in range(n):
        hour = min(rng.gauss(13, 4), 20.0)
        arrive = max(0.0, hour) * 3600
        visits, offset = [], 0.0
        while offset < DAY_S - arrive:
            visits.append((offset, rng.randint(1, 4)))
            if rng.random() < NEVER_RETURN:
                break
            offset += math.exp(rng.uniform(math.log(120), math.log(2 * DAY_S)))
        plans.append(Plan(arrive, visits))
    return plans


class Day:
    """Drives the sessions against the services."""

    def __init__(
        self, clock: SimClock, log: JetStreamLog, broker: Broker, rng: random.Random
    ) -> None:
        self.clock = clock
        self.log = log
        self.broker = broker
        self.rng = rng
        self.out = Results()

    async def session(self, plan: Plan, day_start: float) -> None:
        await self.clock.until(day_start + plan.arrive)
        sid = new_id("s")
        self.out.arrivals[sid] = self.clock.now()
        self.out.activity[sid] = []
        await self.log.append(sid, SessionCreated(device_id="day"), actor="device:day")
        for offset, prompts in plan.visits:
            await self.clock.until(day_start + plan.arrive + offset)
            for _ in range(prompts):
                await self.prompt(sid)
                think = self.rng.uniform(20, 180)
                await asyncio.sleep(think / self.clock.speed)

    async def prompt(self, sid: str) -> None:
        tier = (await self.broker.life.store.get(sid)).record.state
        # Billed tier (pausing counts as running, archiving as paused); none:
        # the session's first sandbox.
        key = BILLED.get(tier) or ("first_use" if tier == "none" else tier)
        script = {"script": [{"tool": "bash", "args": {"command": COMMAND}}]}
        turn = new_id("t")
        began, sim_began = time.monotonic(), self.clock.now()
        text = json.dumps(script)
        stored = await self.log.append(
            sid, UserPrompt(text=text, turn_id=turn), actor="device:day"
        )
        started, first = await self.follow(sid, stored.seq, turn)
        if started is not None:
            self.out.agent_ms.setdefault(key, []).append((started - began) * 1000)
        if first is None:
            self.out.failed_turns += 1
        else:
            self.out.resume_ms.setdefault(key, []).append((first - began) * 1000)
        real_s = time.monotonic() - began
        self.out.activity[sid].append(Activity(sim_began, self.clock.now(), real_s))

    async def follow(
        self, sid: str, after: int, turn: str
    ) -> tuple[float | None, float | None]:
        """Real times of the turn's first worker event (``turn.started``) and
        first successful tool result; waits for the turn's end."""
        started: float | None = None
        first: float | None = None
        async with asyncio.timeout(120):
            async for stored in self.log.tail(sid, after):
                if stored.type == "turn.started" and started is None:
                    started = time.monotonic()
                if stored.type == "tool.result" and first is None:
                    ok = stored.event().data.ok  # type: ignore[union-attr]
                    first = time.monotonic() if ok else None
                if stored.type == "turn.ended":
                    ev = stored.event()
                    if ev.data.turn_id == turn:  # type: ignore[union-attr]
                        break
        return started, first


def quantiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(p95, 1),
        "max_ms": round(ordered[-1], 1),
    }


async def measured_usage(
    log: JetStreamLog, sids: list[str], prices: PriceTable, window: tuple[float, float]
) -> tuple[Any, dict[str, list[tuple[float, str | None]]], dict[str, int]]:
    """The gateway's fold over every session's real log, plus state timelines."""
    parts, states, archive_bytes = [], {}, {}
    for sid in sids:
        fold = UsageFold(prices, *window)
        moves: list[tuple[float, str | None]] = []
        for stored in await log.read(sid):
            if stored.type in ("turn.ended", "sandbox.usage"):
                ev = stored.event()
                fold.add(ev)
                if stored.type == "sandbox.usage":
                    moves.append((ev.data.at, ev.data.next_state))  # type: ignore[union-attr]
                    archive_bytes[sid] = ev.data.archive_bytes  # type: ignore[union-attr]
        parts.append(fold.result(sid, window[1]))
        states[sid] = moves
    return add_up(parts), states, archive_bytes


async def simulate(
    args: argparse.Namespace, nats_url: str, host: Any
) -> dict[str, Any]:
    speed = DAY_S / args.real_s
    clock = SimClock(speed)
    names = BusNames("day" + secrets.token_hex(3))
    nc: Client = await nats.connect(nats_url)
    await ensure_log_stream(nc.jetstream(), names, EventStoreSettings())
    log = JetStreamLog(nc, names)
    gw = GatewaySettings()
    prices = price_table(
        gw.usage_price_running_per_s,
        gw.usage_price_paused_per_s,
        gw.usage_price_archived_gb_month,
        gw.usage_model_prices,
    )
    stop = asyncio.Event()
    async with AsyncExitStack() as stack, aiohttp.ClientSession() as http:
        broker = Broker(broker_settings(names, host, speed), nc, http, clock.now)
        await broker.open(stack)
        await broker.subscribe(stack)
        tasks = [
            asyncio.create_task(broker.sweep_loop(stop)),
            asyncio.create_task(follow_log(nc, names, broker.reaper, stop)),
        ]
        pool = asyncio.create_task(
            run_pool(pool_settings(names, nats_url, speed, args.workers), stop)
        )
        rng = random.Random(args.seed)
        day = Day(clock, log, broker, rng)
        day_start = clock.now()
        plans = plan_day(args.sessions, rng)
        await asyncio.gather(*(day.session(p, day_start) for p in plans))
        await clock.until(day_start + DAY_S)
        day_end = clock.now()
        stop.set()
        await asyncio.gather(pool, *tasks, return_exceptions=True)
        for info in await broker.life.provider.list():
            await broker.life.provider.kill(info.sandbox_id)
    window = (day_start, day_end)
    sids = list(day.out.arrivals)
    total, states, archive_bytes = await measured_usage(log, sids, prices, window)
    await nc.close()
    return report(day.out, total, states, archive_bytes, prices, window, speed, args)


def broker_settings(names: BusNames, host: Any, speed: float) -> BrokerSettings:
    """Timers in simulated seconds. Claim leases are judged on the lifecycle
    clock too, so they are scaled to last their usual 6 real seconds; token
    expiries come from the provider's (real) clock, so grants live longer than
    the simulated day (else every bind would find its token stale)."""
    return msgspec.convert(
        {
            "bus_prefix": names.prefix,
            "broker_provider": "local",
            "sandboxhost_url": host.url,
            "sandboxhost_api_key": host.api_key,
            "sandbox_idle_pause_s": T2_S,
            "sandbox_archive_after_s": T3_S,
            "broker_sweep_s": 0.25,  # real seconds between timer sweeps
            "broker_op_lease_s": 6.0 * speed,
            "broker_token_ttl_s": 3 * DAY_S,
            "sandbox_timeout_s": 7 * 86400,
        },
        BrokerSettings,
    )


def pool_settings(
    names: BusNames, url: str, speed: float, workers: int
) -> PoolSettings:
    return msgspec.convert(
        {
            "nats_url": url,
            "bus_prefix": names.prefix,
            "pool_workers": workers,
            "pool_idle_release_s": T1_S / speed,  # T1 is asyncio (real) time
            "approval": "auto",
            "model": "scripted",
        },
        PoolSettings,
    )


def report(
    out: Results,
    total: Any,
    states: dict[str, list[tuple[float, str | None]]],
    archive_bytes: dict[str, int],
    prices: PriceTable,
    window: tuple[float, float],
    speed: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    day_end = window[1]
    infra = total.cost.running + total.cost.paused + total.cost.archived
    plan_a_s = sum(day_end - t for t in out.arrivals.values())
    plan_a = plan_a_s * prices.running_per_s
    mean_bytes = statistics.mean(archive_bytes.values()) if archive_bytes else 0
    replayed = replay(
        out.activity, out.arrivals, day_end, T2_S, T3_S, mean_bytes, prices
    )
    grid = sweep(out.activity, out.arrivals, day_end, mean_bytes, prices, plan_a)
    corrected = replay(
        out.activity, out.arrivals, day_end, T2_S, T3_S, mean_bytes, prices, True
    )
    turn_s = [a.end - a.start for acts in out.activity.values() for a in acts]
    lines = timeline(states, window)
    chart(grid, lines, Path(args.chart), window)
    resume = {tier: quantiles(v) for tier, v in sorted(out.resume_ms.items())}
    return {
        "sessions": len(out.arrivals),
        "prompts": sum(len(a) for a in out.activity.values()),
        "failed_turns": out.failed_turns,
        "speedup": round(speed, 1),
        "pool_workers": args.workers,
        "timers_s": {"T1": T1_S, "T2": T2_S, "T3": T3_S},
        "sandbox_seconds": msgspec.to_builtins(total.sandbox_seconds),
        "cost_usd": msgspec.to_builtins(total.cost),
        "infra_cost_usd": round(infra, 6),
        "plan_a": {
            "sandbox_seconds_running": round(plan_a_s),
            "cost_usd": round(plan_a, 6),
        },
        "cost_ratio_vs_plan_a": round(infra / plan_a, 4) if plan_a else None,
        "replay_vs_measured": round(replayed / infra, 3) if infra else None,
        "turn_sim_s_p50": round(statistics.median(turn_s), 1) if turn_s else None,
        "cost_ratio_vs_plan_a_turns_at_real_speed": (
            round(corrected / plan_a, 4) if plan_a else None
        ),
        "resume_ms": resume,
        "resume_p95_ms": {t: q.get("p95_ms") for t, q in resume.items()},
        "first_agent_event_ms": {
            tier: quantiles(v) for tier, v in sorted(out.agent_ms.items())
        },
        "sweep": grid,
        "chart": args.chart,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServerProcess(Path(tmp) / "nats")
        server.start()
        host = SandboxHostProcess(Path(tmp) / "host")
        host.start()
        try:
            return await simulate(args, server.url, host)
        finally:
            host.stop()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument(
        "--real-s", type=float, default=200.0, help="real seconds a day takes"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=6, help="warm pool workers")
    parser.add_argument(
        "--chart", default=str(Path(__file__).resolve().parents[1] / "docs" / "day.png")
    )
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
