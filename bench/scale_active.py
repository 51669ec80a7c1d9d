"""``active`` of ``bench/scale.py``: sessions at work at once (issue 15).

A real ``agentbus up`` (``bench/chaoslib.UpStack``: nats-server, gateway, pool
with real worker processes, broker, projector, local sandbox host with real
sandboxes), the scripted model and the 12-step reference task
(``services/pool/models/demo.py``; each turn in its own ``calcK`` package so all
12 tools succeed every time). Per level of N sessions: N new sessions, each
with an SSE reader; one warm-up turn each (its sandbox is created, a worker
bound; not measured); then every session sends reference-task prompts back to
back for ``--active-s`` seconds (the turn in flight is finished). Each level
runs on its own fresh stack with N pool workers (one per session), sessions
spread over devices of 20 (the gateway caps live sandboxes per device); every
sandbox is killed before the stack stops.

Measured per level, from the events themselves (``ts`` is stamped by the
writer when it appends, so the bench client's own scheduling is not in it):
tool calls per second, tool call p50/p99 (``tool.call`` → its ``tool.result``),
prompt → ``turn.started`` p50/p99 (``user.prompt`` → ``turn.started``); the
same two as the SSE client saw them (``client_seen``); events lost: seq gaps at
the readers, prompts not answered within 120 s, and every session's log read
back and audited (contiguous seqs, hash chain); ``cpu_cores``: each service's
share of a core meanwhile (workers and sandboxes under pool and sandbox host);
the load average before and after, as the machine is shared. The sweep stops
after the first level whose tool call p99 is over ``--active-stop-ms`` (400:
twice the 200 ms target; 0: run every level).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import nats

from bench.chaoslib import Reader, UpStack, descendants, process_usage
from bench.scalelib import pct
from eventstore.audit import verify
from eventstore.log import JetStreamLog
from schemas.ids import new_id
from schemas.names import BusNames
from services.common.localnats import find_local_nats
from services.gateway.tokens import issue, load_secret
from services.pool.models.demo import DEMO_SCRIPT
from services.sandboxhost.service import api_key
from services.sandboxhost.settings import SandboxHostSettings

TARGET_P99_MS = 200.0
ANSWER_S = 120.0
# Sessions per device: under the gateway's live-sandbox cap per device (32).
PER_DEVICE = 20
WARMUP_S = 600.0
WARMUP_AT_ONCE = 20
POST_TRIES = 5
WARMUP = json.dumps({"script": [{"tool": "ls", "args": {"path": "/workspace"}}]})


def reference_steps() -> list[dict[str, Any]]:
    """The 12-step reference task: the demo before its newer hands (terminal,
    code, lsp were appended to it later; lsp alone waits ~0.5 s by design)."""
    cut = next(i for i, s in enumerate(DEMO_SCRIPT) if s.get("tool") == "terminal")
    steps = DEMO_SCRIPT[: cut - 1]  # the terminal's introduction goes too
    if sum("tool" in s for s in steps) != 12:
        raise RuntimeError("the demo no longer starts with the 12 reference steps")
    return steps


def reference_task(k: int) -> str:
    """The 12 reference steps as a script, in package ``calc<k>``."""
    return json.dumps({"script": reference_steps()}).replace("calc", f"calc{k}")


def _ts(body: dict[str, Any]) -> float:
    return datetime.fromisoformat(body["ts"]).timestamp()


class ActiveReader(Reader):
    """The SSE reader of ``chaoslib`` that also times tool calls and turn starts."""

    def __init__(self, stack: UpStack, http: aiohttp.ClientSession, sid: str) -> None:
        super().__init__(stack, http, sid)
        self.measuring = False
        self.calls: dict[str, tuple[float, float, str]] = {}  # call_id: ts, seen, tool
        self.tool_ms: list[float] = []
        self.by_tool: dict[str, list[float]] = {}
        self.tool_seen_ms: list[float] = []
        self.prompts: dict[str, float] = {}  # turn_id: user.prompt ts
        self.start_ms: list[float] = []
        self.sent: dict[str, float] = {}  # turn_id: when the client posted it
        self.start_seen_ms: list[float] = []

    def _on(self, seq: int, kind: str, data: str) -> None:
        if seq > self.last and self.measuring:
            self._time(kind, json.loads(data), time.monotonic())
        super()._on(seq, kind, data)

    def _time(self, kind: str, event: dict[str, Any], seen: float) -> None:
        body = event.get("data", {})
        if kind == "tool.call":
            self.calls[body["call_id"]] = (_ts(event), seen, body["tool"])
        elif kind == "tool.result" and body["call_id"] in self.calls:
            ts, seen0, tool = self.calls.pop(body["call_id"])
            self.tool_ms.append((_ts(event) - ts) * 1000)
            self.by_tool.setdefault(tool, []).append(self.tool_ms[-1])
            self.tool_seen_ms.append((seen - seen0) * 1000)
        elif kind == "user.prompt":
            self.prompts[body["turn_id"]] = _ts(event)
        elif kind == "turn.started" and body["turn_id"] in self.prompts:
            self.start_ms.append((_ts(event) - self.prompts[body["turn_id"]]) * 1000)
            if body["turn_id"] in self.sent:
                self.start_seen_ms.append((seen - self.sent[body["turn_id"]]) * 1000)


class Worker:
    """One session at work: posts prompts, waits for each turn's end."""

    def __init__(self, stack: UpStack, http: aiohttp.ClientSession, sid: str) -> None:
        self.stack, self.http, self.sid = stack, http, sid
        self.reader = ActiveReader(stack, http, sid)
        self.turns = 0
        self.unanswered = 0
        self.post_retries = 0
        self.post_reconnects = 0

    async def turn(self, text: str, answer_s: float = ANSWER_S) -> None:
        posted = time.monotonic()
        turn_id = await self._post(text)
        self.reader.sent[turn_id] = posted
        try:
            await asyncio.wait_for(self.reader.ended(turn_id), answer_s)
            self.turns += self.reader.measuring
        except TimeoutError:
            self.unanswered += 1

    async def _post(self, text: str) -> str:
        """Post a prompt as an App does: a 503 (the bus busy) or a dropped
        connection is retried with the same ``client_msg_id``, which the
        gateway answers once."""
        url = self.stack.url(f"/v1/sessions/{self.sid}/prompt")
        body = {"text": text, "client_msg_id": new_id("m")}
        for attempt in range(POST_TRIES):
            last = attempt == POST_TRIES - 1
            try:
                async with self.http.post(url, json=body, headers=self.stack.auth) as r:
                    if r.status == 503 and not last:
                        self.post_retries += 1
                        await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
                        continue
                    assert r.status == 202, (r.status, await r.text())
                    return str((await r.json())["turn_id"])
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                if last:
                    raise
                self.post_reconnects += 1  # a kept-alive connection the server closed
        raise AssertionError("unreachable")

    async def work(self, until: float, first: int) -> None:
        k = first
        while time.monotonic() < until:
            await self.turn(reference_task(k))
            k += 1


def cpu_seconds(stack: UpStack) -> dict[str, float]:
    """CPU seconds so far of each part of the stack (workers and sandboxes
    summed under their pool and sandbox host)."""
    state = stack.state()
    parts = {s["name"]: s["pid"] for s in state["services"]}
    parts |= {n["name"]: n["pid"] for n in state["nats"]}
    out: dict[str, float] = {}
    for name, pid in parts.items():
        total = 0.0
        for each in {pid, *descendants(pid)}:
            try:
                total += process_usage(each)[0]
            except (OSError, StopIteration):
                continue  # exited meanwhile
        out[name] = total
    return out


async def audit_logs(stack: UpStack, sids: list[str]) -> dict[str, int]:
    """Every session's log read back: contiguous seqs and an unbroken chain."""
    local = find_local_nats(stack.data)
    assert local is not None, "no local NATS credentials in the data dir"
    nc = await nats.connect(local.url.split(","), user=local.user,
                            password=local.password)  # fmt: skip
    broken, events = 0, 0
    try:
        log = JetStreamLog(nc, BusNames())
        for sid in sids:
            stored = await log.read(sid)
            events += len(stored)
            ok = [e.seq for e in stored] == list(range(1, len(stored) + 1))
            broken += not (ok and verify(sid, stored).first_break is None)
    finally:
        await nc.close()
    return {"events": events, "broken_logs": broken}


async def new_session(stack: UpStack, http: aiohttp.ClientSession) -> str:
    """``POST /v1/sessions``, retried while the stack is still starting (5xx)."""
    deadline = time.monotonic() + 120
    while True:
        async with http.post(stack.url("/v1/sessions"), json={},
                             headers=stack.auth) as r:  # fmt: skip
            body = await r.json()
            if r.status == 201:
                return str(body["session_id"])
        if r.status < 500 or time.monotonic() > deadline:
            raise AssertionError(f"POST /v1/sessions: {r.status} {body}")
        await asyncio.sleep(1)  # retry pacing


def as_device(stack: UpStack, device: str) -> UpStack:
    """The stack as seen by ``device`` (its own bearer token)."""
    view = copy.copy(stack)
    view.auth = {
        "Authorization": f"Bearer {issue(load_secret(stack.data, None), device)}"
    }
    return view


async def kill_sandboxes(stack: UpStack, http: aiohttp.ClientSession) -> int:
    """Kill every sandbox on the host (they outlive a stopped host by design)."""
    key = {"X-API-Key": api_key(SandboxHostSettings(), stack.data / "sandboxhost")}
    base = f"http://{stack.env['AGENTBUS_SANDBOXHOST_LISTEN']}"
    killed = 0
    for _ in range(10):
        async with http.get(f"{base}/v2/sandboxes", headers=key) as r:
            listed = await r.json() if r.status == 200 else []
        if not listed:
            break
        for item in listed:
            url = f"{base}/sandboxes/{item['sandboxID']}"
            async with http.delete(url, headers=key) as r:
                killed += r.status == 204
    return killed


async def warm_up(workers: list[Worker]) -> int:
    """One turn each: binds a worker, creates the sandbox (not measured). At
    most ``WARMUP_AT_ONCE`` at a time; a turn whose tool failed (a sandbox that
    did not start in time) is tried again, twice at most. Returns the retries."""
    gate, retries = asyncio.Semaphore(WARMUP_AT_ONCE), 0

    async def one(w: Worker) -> None:
        nonlocal retries
        async with gate:
            for attempt in range(3):
                failed = w.reader.failed_tools
                await w.turn(WARMUP, WARMUP_S)
                if w.reader.failed_tools == failed:
                    break
                retries += attempt < 2

    await asyncio.gather(*(one(w) for w in workers))
    return retries


async def level(
    stack: UpStack, http: aiohttp.ClientSession, n: int, seconds: float
) -> dict[str, Any]:
    views = [as_device(stack, f"active{i // PER_DEVICE}") for i in range(n)]
    sids = [await new_session(view, http) for view in views]
    workers = [Worker(v, http, sid) for v, sid in zip(views, sids, strict=True)]
    stop = asyncio.Event()
    readers = [asyncio.create_task(w.reader.run(stop)) for w in workers]
    try:
        t_warm = time.monotonic()
        retries = await warm_up(workers)
        warm_s = time.monotonic() - t_warm
        for w in workers:
            w.reader.measuring = True
            w.reader.failed_tools = 0
        load0, cpu0 = os.getloadavg()[0], cpu_seconds(stack)
        t0 = time.monotonic()
        await asyncio.gather(*(w.work(t0 + seconds, 1) for w in workers))
        elapsed = time.monotonic() - t0
        cpu1 = cpu_seconds(stack)
    finally:
        stop.set()
        await asyncio.wait(readers, timeout=10)
    out = summary(workers, n, elapsed, warm_s)
    out["warmup_retries"] = retries
    out["loadavg_1m"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    # Share of one core each part used while the sessions worked.
    out["cpu_cores"] = {
        k: round((cpu1[k] - cpu0.get(k, 0.0)) / elapsed, 2) for k in sorted(cpu1)
    }
    out.update(await audit_logs(stack, sids))
    out["lost"] += out["broken_logs"]
    return out


def summary(
    workers: list[Worker], n: int, elapsed: float, warm_s: float
) -> dict[str, Any]:
    def every(attr: str) -> list[float]:
        return [x for w in workers for x in getattr(w.reader, attr)]

    tool, start = every("tool_ms"), every("start_ms")
    tools: dict[str, list[float]] = {}
    for w in workers:
        for name, values in w.reader.by_tool.items():
            tools.setdefault(name, []).extend(values)
    return {
        "n": n,
        "warmup_s": round(warm_s, 1),
        "seconds": round(elapsed, 1),
        "turns": sum(w.turns for w in workers),
        "tool_calls": len(tool),
        "tool_calls_per_s": round(len(tool) / elapsed, 1),
        "tool_p50_ms": pct(tool, 0.5),
        "tool_p99_ms": pct(tool, 0.99),
        "turn_start_p50_ms": pct(start, 0.5),
        "turn_start_p99_ms": pct(start, 0.99),
        "by_tool_p50_p99_ms": {
            name: [pct(v, 0.5), pct(v, 0.99)] for name, v in sorted(tools.items())
        },
        "client_seen": {
            "tool_p99_ms": pct(every("tool_seen_ms"), 0.99),
            "turn_start_p50_ms": pct(every("start_seen_ms"), 0.5),
            "turn_start_p99_ms": pct(every("start_seen_ms"), 0.99),
        },
        "failed_tool_calls": sum(w.reader.failed_tools for w in workers),
        "prompt_503_retries": sum(w.post_retries for w in workers),
        "prompt_reconnects": sum(w.post_reconnects for w in workers),
        "unanswered": sum(w.unanswered for w in workers),
        "lost": sum(w.reader.lost + w.unanswered for w in workers),
        "duplicated": sum(w.reader.duplicated for w in workers),
    }


async def one_level(n: int, seconds: float, workdir: Path) -> dict[str, Any]:
    """A fresh ``agentbus up`` with ``n`` pool workers, one level on it."""
    stack = UpStack(workdir, 1, n)
    # ``n`` worker processes importing at once on 2 cores take minutes.
    stack.env["AGENTBUS_POOL_WORKER_START_TIMEOUT_S"] = "600"
    await stack.start()
    timeout = aiohttp.ClientTimeout(total=WARMUP_S + 30)
    try:
        # No connection limit: N SSE streams plus N prompts in flight (aiohttp's
        # default of 100 held level 100's prompts back until they timed out).
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
            try:
                out = await level(stack, http, n, seconds)
            finally:
                killed = await kill_sandboxes(stack, http)
    finally:
        leftovers = await stack.stop_and_count_leftovers()
    out["leftover_processes"] = leftovers["after_stop"]
    out["sandboxes_killed"] = killed
    out["service_restarts"] = sum(
        log.read_text(errors="replace").count("exited unexpectedly")
        for log in workdir.glob("up*.log")
    )
    return out


async def sweep(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for n in (int(x) for x in args.active_levels.split(",") if x):
        (workdir / str(n)).mkdir()
        runs.append(await one_level(n, args.active_s, workdir / str(n)))
        print(json.dumps({"active_level": runs[-1]}), file=sys.stderr, flush=True)
        if args.active_stop_ms and runs[-1]["tool_p99_ms"] > args.active_stop_ms:
            break  # clearly over: a larger level would be too
    return result(runs)


def result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    top = runs[-1]
    within = [r["n"] for r in runs if r["tool_p99_ms"] <= TARGET_P99_MS]
    return {
        "n": top["n"],
        "tool_calls_per_s": top["tool_calls_per_s"],
        "tool_p99_ms": top["tool_p99_ms"],
        "turn_start_p99_ms": top["turn_start_p99_ms"],
        "lost": sum(r["lost"] for r in runs),
        "max_sessions": max(within, default=0),
        "target_tool_p99_ms": TARGET_P99_MS,
        "levels": runs,
        "leftover_processes": sum(r["leftover_processes"] for r in runs),
    }


async def bench_active(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-active-") as tmp:
        return await sweep(args, Path(tmp))
