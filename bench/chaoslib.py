"""Pieces of bench/chaos.py: the `agentbus up` under test and an SSE reader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import nats

from services.common.localnats import find_local_nats
from services.common.natsserver import free_port
from services.gateway.tokens import issue, load_secret
from services.sandboxhost.service import api_key
from services.sandboxhost.settings import SandboxHostSettings

ROOT = Path(__file__).resolve().parents[1]


def pid_alive(pid: int) -> bool:
    """Live and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(") ", 1)[1][:1] not in {"Z", "X"}


async def wait_healthy(
    http: aiohttp.ClientSession, url: str, timeout_s: float, every_s: float = 0.05
) -> None:
    """Poll a starting gateway's ``/healthz`` (``url``) until it answers 200."""
    async with asyncio.timeout(timeout_s):
        while True:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with http.get(url) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(every_s)


def process_usage(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss_kb = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    return cpu, rss_kb / 1024


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                if kid not in found:
                    found.add(kid)
                    todo.append(kid)
    return found


def mentions(path: str) -> set[int]:
    """Processes whose command line or environment names ``path``."""
    needle = path.encode()
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            blob = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if (
            needle in blob
            and int(proc.name) != os.getpid()
            and pid_alive(int(proc.name))
        ):
            found.add(int(proc.name))
    return found


def _name(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return str(pid)
    return " ".join(a.decode(errors="replace") for a in argv[:4])[:80]


class Reader:
    """One session's SSE follower: resumes with Last-Event-ID, counts gaps/repeats."""

    def __init__(self, stack: UpStack, http: aiohttp.ClientSession, sid: str) -> None:
        self.stack, self.http, self.sid = stack, http, sid
        self.last = 0
        self.lost = 0
        self.duplicated = 0
        self.failed_tools = 0
        self.stops: dict[str, int] = {}
        self.started: dict[str, float] = {}
        self.turns: dict[str, tuple[float, str, bool]] = {}
        self._turn_failed = 0
        self._waiters: dict[str, asyncio.Event] = {}
        # Set once the session's sandbox is announced ``creating`` (mid-create).
        self.creating = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        stopping = asyncio.create_task(stop.wait())
        while not stop.is_set():
            stream = asyncio.create_task(self._stream())
            await asyncio.wait({stream, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stream.cancel()
            with contextlib.suppress(
                asyncio.CancelledError, aiohttp.ClientError, OSError
            ):
                await stream
            if not stop.is_set():
                await asyncio.sleep(0.2)  # reconnect pacing

    async def _stream(self) -> None:
        headers = {**self.stack.auth, "Last-Event-ID": str(self.last)}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=40)
        url = self.stack.url(f"/v1/sessions/{self.sid}/events")
        async with self.http.get(url, headers=headers, timeout=timeout) as r:
            if r.status != 200:
                return
            frame: dict[str, str] = {}
            async for raw in r.content:
                line = raw.decode(errors="replace").rstrip("\r\n")
                if line == "":
                    if "id" in frame and "data" in frame:
                        self._on(
                            int(frame["id"]), frame.get("event", ""), frame["data"]
                        )
                    frame = {}
                elif not line.startswith(":"):
                    key, _, value = line.partition(": ")
                    frame[key] = value

    def _on(self, seq: int, kind: str, data: str) -> None:
        if seq <= self.last:
            self.duplicated += 1
            return
        self.lost += seq - self.last - 1
        self.last = seq
        body = json.loads(data).get("data", {})
        if kind == "turn.started":
            self._turn_failed = 0
            self.started[body["turn_id"]] = time.monotonic()
        elif kind == "sandbox.state" and body.get("state") == "creating":
            self.creating.set()
        elif kind == "tool.result" and not body.get("ok", True):
            self.failed_tools += 1
            self._turn_failed += 1
        elif kind == "turn.ended":
            reason = body.get("stop_reason", "?")
            self.stops[reason] = self.stops.get(reason, 0) + 1
            clean = reason == "end_turn" and self._turn_failed == 0
            turn_id = body["turn_id"]
            self.turns[turn_id] = (time.monotonic(), reason, clean)
            self._waiters.setdefault(turn_id, asyncio.Event()).set()

    async def ended(self, turn_id: str) -> None:
        """Until ``turn.ended`` of ``turn_id`` was read."""
        await self._waiters.setdefault(turn_id, asyncio.Event()).wait()

    def first_clean_after(self, since: float) -> float | None:
        """End time of the first clean turn started at or after ``since``."""
        ends = [
            t
            for tid, (t, _, clean) in self.turns.items()
            if clean and self.started.get(tid, 0.0) >= since
        ]
        return min(ends, default=None)


class UpStack:
    """`agentbus up` on free ports in ``workdir``; killable and restartable."""

    def __init__(self, workdir: Path, cluster: int, workers: int) -> None:
        self.workdir = workdir
        self.data = workdir / "data"
        self.cluster = cluster
        self.workers = workers
        self.http_addr = f"127.0.0.1:{free_port()}"
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")
        }
        self.env |= {
            "AGENTBUS_NATS_PORT": str(free_port()),
            "AGENTBUS_SANDBOXHOST_LISTEN": f"127.0.0.1:{free_port()}",
            "AGENTBUS_RESTART_BACKOFF_S": "0.2",
            "AGENTBUS_RESTART_BACKOFF_MAX_S": "2",
            "AGENTBUS_GATEWAY_RATE_PER_S": "0",
        }
        self.auth: dict[str, str] = {}
        self.up: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.leftovers_after_up_kill = 0
        self.leftover_names: list[str] = []

    def _spawn(self) -> None:
        self.runs += 1
        argv = [
            sys.executable,
            "-m",
            "services.cli",
            "up",
            "--data-dir",
            str(self.data),
        ]
        argv += ["--http", self.http_addr, "--approval", "auto"]
        argv += ["--workers", str(self.workers), "--nats-cluster", str(self.cluster)]
        with (self.workdir / f"up{self.runs}.log").open("ab") as out:
            self.up = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    async def start(self) -> None:
        self._spawn()
        async with aiohttp.ClientSession() as http:
            await wait_healthy(http, self.url("/healthz"), 120, every_s=0.2)
        token = issue(load_secret(self.data, None), "chaos")
        self.auth = {"Authorization": f"Bearer {token}"}

    def url(self, path: str) -> str:
        return f"http://{self.http_addr}{path}"

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.data / "up.json").read_text())
        return data

    async def session(self, http: aiohttp.ClientSession) -> str:
        async with http.post(self.url("/v1/sessions"), json={}, headers=self.auth) as r:
            return str((await r.json())["session_id"])

    async def log_leader(self) -> str:
        local = find_local_nats(self.data)
        assert local is not None
        nc = await nats.connect(
            local.url.split(","), user=local.user, password=local.password
        )
        try:
            info = await nc.jetstream().stream_info("AGENTBUS_LOG")
        finally:
            await nc.close()
        return info.cluster.leader if info.cluster and info.cluster.leader else "nats-0"

    async def victim(self, fault: str) -> tuple[int | None, str]:
        state = self.state()
        nodes = {n["name"]: n["pid"] for n in state["nats"]}
        services = {s["name"]: s["pid"] for s in state["services"]}
        if fault.startswith("nats_"):
            leader = await self.log_leader()
            if fault == "nats_log_leader":
                return nodes.get(leader), leader
            others = sorted(n for n in nodes if n != leader)
            return (nodes[others[0]], others[0]) if others else (None, "")
        if fault == "worker":
            return await self.worker()
        name = next((n for n in sorted(services) if n.startswith(fault)), None)
        if name is None:
            return None, ""
        return services[name], name

    async def worker(self) -> tuple[int | None, str]:
        pool = next(s for s in self.state()["services"] if s["name"].startswith("pool"))
        kids = sorted(descendants(pool["pid"]))
        return (kids[0], f"worker of {pool['name']}") if kids else (None, "")

    async def kill_up_and_restart(self) -> None:
        assert self.up is not None
        before = descendants(self.up.pid)
        self.up.kill()
        self.up.wait()
        # The pool drains its workers for up to AGENTBUS_POOL_DRAIN_S (10 s).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(pid_alive(p) for p in before):
            await asyncio.sleep(0.1)
        left = [p for p in before if pid_alive(p)]
        self.leftovers_after_up_kill += len(left)
        self.leftover_names += [_name(p) for p in left]
        await self.start()

    async def faults(self, http: aiohttp.ClientSession, body: dict[str, Any]) -> None:
        """Set the sandbox host's fault injection (``/admin/faults``)."""
        key = api_key(SandboxHostSettings(), self.data / "sandboxhost")
        url = f"http://{self.env['AGENTBUS_SANDBOXHOST_LISTEN']}/admin/faults"
        async with http.post(url, json=body, headers={"X-API-Key": key}) as r:
            r.raise_for_status()

    async def audit(self, sids: list[str]) -> dict[str, Any]:
        """`agentbus audit` of every session, from the log and from SQLite."""
        db = str(self.data / "projection.db")
        runs = [(sid, []) for sid in sids] + [(sid, ["--db", db]) for sid in sids]
        gate = asyncio.Semaphore(4)  # 40 interpreters at once time out on 2 cores

        async def one(sid: str, extra: list[str]) -> int:
            async with gate:
                return await self._audit(sid, extra)

        codes = await asyncio.gather(*(one(sid, extra) for sid, extra in runs))
        n = len(sids)
        return {
            "sessions": n,
            "log_verified": sum(c == 0 for c in codes[:n]),
            "projector_verified": sum(c == 0 for c in codes[n:]),
        }

    async def _audit(self, sid: str, extra: list[str]) -> int:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "services.cli", "audit", sid, "--data-dir", str(self.data)),
            *extra,
            cwd=ROOT,
            env=self.env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        return await proc.wait()

    async def delete_and_count_orphans(
        self, http: aiohttp.ClientSession, sids: list[str]
    ) -> dict[str, Any]:
        """DELETE every session; sandboxes still running 60 s later are orphans."""
        accepted = 0
        for sid in sids:
            with contextlib.suppress(aiohttp.ClientError):
                url = self.url(f"/v1/sessions/{sid}")
                async with http.delete(url, headers=self.auth) as r:
                    accepted += r.status == 202
        key = api_key(SandboxHostSettings(), self.data / "sandboxhost")
        host = f"http://{self.env['AGENTBUS_SANDBOXHOST_LISTEN']}/sandboxes"
        count: int | None = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and count != 0:
            await asyncio.sleep(0.5)
            try:
                async with http.get(host, headers={"X-API-Key": key}) as r:
                    count = len(await r.json()) if r.status == 200 else None
            except aiohttp.ClientError:
                count = None
        return {"deletes_accepted": accepted, "sandboxes_running_after": count}

    async def stop_and_count_leftovers(self) -> dict[str, int]:
        assert self.up is not None
        before = descendants(self.up.pid)
        self.up.send_signal(signal.SIGTERM)
        try:
            self.up.wait(60)
        except subprocess.TimeoutExpired:
            self.up.kill()
            self.up.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and mentions(str(self.data)):
            await asyncio.sleep(0.1)
        left = mentions(str(self.data)) | {p for p in before if pid_alive(p)}
        names = [_name(p) for p in left]
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return {
            "after_stop": len(left),
            "after_up_sigkill": self.leftovers_after_up_kill,
            "which": names + self.leftover_names,
        }
