"""Exec adapter benchmark: the 12-step reference tool script through our envd
client and through the official ``e2b`` SDK against the same sandbox host.

Prints JSON: per-step latency p50/p95 and HTTP requests for each, side by side;
read and ``bash true`` p50. Usage:

    .venv/bin/python bench/exec.py [--url URL --api-key KEY] [--iterations N]

Without ``--url`` it starts a local sandbox host on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.common.natsserver import free_port
from services.envd import EnvdClient, SandboxTools

OPS = (
    "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n\n\n"
    "def safe_div(a, b):\n    return a / b\n"
)
OLD = "    return a / b\n"
NEW = "    if b == 0:\n        raise ValueError('division by zero')\n    return a / b\n"
TEST_OPS = (
    "from calc.ops import safe_div\n\n\ndef test_div():\n"
    "    assert safe_div(4, 2) == 2\n"
)
STEPS = [
    "1 ls /workspace",
    "2 write calc/__init__.py",
    "3 write calc/ops.py",
    "4 read calc/ops.py",
    "5 edit calc/ops.py",
    "6 write tests/test_ops.py",
    "7 grep ValueError calc/",
    "8 glob **/*.py",
    "9 bash import calc.ops",
    "10 bash ls -la calc",
    "11 read tests/test_ops.py",
    "12 bash grep -rn safe_div .",
]
Step = Callable[[], Awaitable[Any]]


def ours_steps(tools: SandboxTools) -> list[Step]:
    """The script through SandboxTools (our envd client)."""
    return [
        lambda: tools.ls("/workspace"),
        lambda: tools.write("calc/__init__.py", ""),
        lambda: tools.write("calc/ops.py", OPS),
        lambda: tools.read("calc/ops.py"),
        lambda: tools.edit("calc/ops.py", OLD, NEW),
        lambda: tools.write("tests/test_ops.py", TEST_OPS),
        lambda: tools.grep("ValueError", "calc/"),
        lambda: tools.glob("**/*.py"),
        lambda: tools.bash("python3 -c 'import calc.ops'"),
        lambda: tools.bash("ls -la calc"),
        lambda: tools.read("tests/test_ops.py"),
        lambda: tools.bash("grep -rn safe_div ."),
    ]


def sdk_steps(sbx: Any) -> list[Step]:
    """The same script with plain e2b SDK calls (what an SDK-based adapter sends)."""
    ws = "/workspace"

    async def edit() -> None:
        text = await sbx.files.read(f"{ws}/calc/ops.py")
        await sbx.files.write(f"{ws}/calc/ops.py", text.replace(OLD, NEW, 1))

    def run(cmd: str) -> Step:
        return lambda: sbx.commands.run(cmd, cwd=ws)

    return [
        lambda: sbx.files.list(ws),
        lambda: sbx.files.write(f"{ws}/calc/__init__.py", ""),
        lambda: sbx.files.write(f"{ws}/calc/ops.py", OPS),
        lambda: sbx.files.read(f"{ws}/calc/ops.py"),
        edit,
        lambda: sbx.files.write(f"{ws}/tests/test_ops.py", TEST_OPS),
        run("grep -rnE ValueError calc/"),
        run("shopt -s globstar nullglob; printf '%s\\n' **/*.py"),
        run("python3 -c 'import calc.ops'"),
        run("ls -la calc"),
        lambda: sbx.files.read(f"{ws}/tests/test_ops.py"),
        run("grep -rn safe_div ."),
    ]


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) in milliseconds, 3 decimals."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return round(ordered[index] * 1000, 3)


class CountingProxy:
    """A pass-through HTTP proxy that counts requests (for the SDK's round trips)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.count = 0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Forward one request, streaming the answer back."""
        self.count += 1
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        ) as up:
            resp = web.StreamResponse(status=up.status)
            for k, v in up.headers.items():
                if k.lower() not in _HOP:
                    resp.headers[k] = v
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[CountingProxy]:
        """Serve until the block ends."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        async with aiohttp.ClientSession(auto_decompress=False) as self._session:
            await site.start()
            try:
                yield self
            finally:
                await runner.cleanup()


_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


async def timed(step: Step) -> float:
    """Seconds one step takes."""
    began = time.perf_counter()
    await step()
    return time.perf_counter() - began


async def script_latencies(
    make: Callable[[], Awaitable[list[Step]]], reset: Step, iterations: int
) -> list[list[float]]:
    """Per-step latencies over ``iterations`` runs of the script."""
    per_step: list[list[float]] = [[] for _ in STEPS]
    for _ in range(iterations):
        await reset()
        steps = await make()
        for i, step in enumerate(steps):
            per_step[i].append(await timed(step))
    return per_step


async def script_requests(
    make: Callable[[], Awaitable[list[Step]]], reset: Step, proxy: CountingProxy
) -> list[int]:
    """HTTP requests per step, as seen by the counting proxy."""
    await reset()
    steps = await make()
    counts = []
    for step in steps:
        before = proxy.count
        await step()
        counts.append(proxy.count - before)
    return counts


async def micro(step: Step, n: int) -> float:
    """p50 in ms of ``n`` runs of one call (after 5 warm-ups)."""
    for _ in range(5):
        await step()
    return pct([await timed(step) for _ in range(n)], 0.5)


@contextlib.asynccontextmanager
async def sandbox_host(
    url: str | None, api_key: str | None
) -> AsyncIterator[tuple[str, str]]:
    """The given host, or a real local one (``agentbus sandboxhost``) for the run."""
    if url:
        yield url.rstrip("/"), api_key or ""
        return
    from tests.plugins.sandboxhost import SandboxHostProcess

    with tempfile.TemporaryDirectory(prefix="bench-exec-") as data:
        env = {**os.environ, "AGENTBUS_SANDBOXHOST_LOG_LEVEL": "WARNING"}
        host = SandboxHostProcess(Path(data) / "host", env=env)
        await asyncio.to_thread(host.start)
        try:
            yield host.url, host.api_key
        finally:
            await asyncio.to_thread(host.stop)


async def create_sandbox(base: str, key: str) -> tuple[str, str | None]:
    """``POST /v2/sandboxes`` → (sandbox id, envd access token)."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            base + "/v2/sandboxes",
            json={"templateID": "base", "timeout": 900},
            headers={"X-API-KEY": key},
        ) as resp,
    ):
        body = await resp.json()
        if resp.status != 201:
            raise RuntimeError(f"create sandbox: {resp.status} {body}")
    return body["sandboxID"], body.get("envdAccessToken")


async def kill_sandbox(base: str, key: str, sandbox_id: str) -> None:
    """``DELETE /sandboxes/{id}``."""
    async with (
        aiohttp.ClientSession() as session,
        session.delete(
            f"{base}/sandboxes/{sandbox_id}", headers={"X-API-KEY": key}
        ) as resp,
    ):
        await resp.read()


async def connect_sdk(base: str, key: str, sandbox_id: str, sandbox_url: str) -> Any:
    """The official SDK connected to the sandbox (control plane direct)."""
    from e2b import AsyncSandbox

    return await AsyncSandbox.connect(
        sandbox_id, api_key=key, api_url=base, sandbox_url=sandbox_url
    )


def side_by_side(
    ours: list[list[float]],
    ours_rt: list[int],
    sdk: list[list[float]],
    sdk_rt: list[int],
) -> list[dict[str, Any]]:
    """One row per step with both implementations' figures."""
    return [
        {
            "step": name,
            "ours": {
                "p50_ms": pct(ours[i], 0.5),
                "p95_ms": pct(ours[i], 0.95),
                "round_trips": ours_rt[i],
            },
            "e2b_sdk": {
                "p50_ms": pct(sdk[i], 0.5),
                "p95_ms": pct(sdk[i], 0.95),
                "round_trips": sdk_rt[i],
            },
        }
        for i, name in enumerate(STEPS)
    ]


async def bench(base: str, key: str, iterations: int, n_micro: int) -> dict[str, Any]:
    """Run everything against one sandbox; return the report."""
    sandbox_id, token = await create_sandbox(base, key)
    try:
        async with (
            EnvdClient(base, sandbox_id, token) as client,
            CountingProxy(base).running() as proxy,
            EnvdClient(proxy.url, sandbox_id, token) as counted,
        ):
            return await _measure(
                base, key, sandbox_id, client, counted, proxy, iterations, n_micro
            )
    finally:
        await kill_sandbox(base, key, sandbox_id)


async def _measure(
    base: str,
    key: str,
    sandbox_id: str,
    client: EnvdClient,
    counted: EnvdClient,
    proxy: CountingProxy,
    iterations: int,
    n_micro: int,
) -> dict[str, Any]:
    async def reset() -> None:
        await client.run("rm -rf /workspace/calc /workspace/tests /workspace/bench")

    async def ours_make(c: EnvdClient = client) -> list[Step]:
        return ours_steps(SandboxTools(c))

    async def counted_make() -> list[Step]:
        return await ours_make(counted)

    sdk = await connect_sdk(base, key, sandbox_id, base)
    sdk_counted = await connect_sdk(base, key, sandbox_id, proxy.url)

    async def sdk_make() -> list[Step]:
        return sdk_steps(sdk)

    async def sdk_counted_make() -> list[Step]:
        return sdk_steps(sdk_counted)

    ours_lat = await script_latencies(ours_make, reset, iterations)
    sdk_lat = await script_latencies(sdk_make, reset, iterations)
    before = counted.round_trips
    ours_rt = await script_requests(counted_make, reset, proxy)
    client_counter = counted.round_trips - before  # reset runs on the other client
    sdk_rt = await script_requests(sdk_counted_make, reset, proxy)
    return {
        "benchmark": "exec",
        "iterations": iterations,
        "steps": side_by_side(ours_lat, ours_rt, sdk_lat, sdk_rt),
        "script_total_round_trips": {
            "ours": sum(ours_rt),
            "e2b_sdk": sum(sdk_rt),
            "ours_client_counter": client_counter,
        },
        "micro_p50_ms": await micro_report(client, sdk, n_micro),
        "notes": NOTES,
        "targets": {
            "read_p50_ms": 3,
            "bash_true_p50_ms": 15,
            "round_trips": {"read": 1, "write": 2, "bash": 1},
        },
    }


NOTES = (
    "round_trips = HTTP requests seen by a counting proxy. e2b_sdk rows are bare SDK "
    "calls with no path resolution or containment check; ours include a Stat per new "
    "path per generation (write of a new file; read after a bash command, sent in "
    "parallel with the GET). micro = warm tool calls (read: cached path, 1 GET)."
)


async def micro_report(client: EnvdClient, sdk: Any, n: int) -> dict[str, float]:
    """read and ``bash true`` p50 through our tools and through the SDK."""
    tools = SandboxTools(client)
    await tools.write("bench/read.txt", OPS)
    await sdk.files.write("/workspace/bench/read_sdk.txt", OPS)
    return {
        "ours_read": await micro(lambda: tools.read("bench/read.txt"), n),
        "ours_bash_true": await micro(lambda: tools.bash("true"), n),
        "e2b_sdk_read": await micro(
            lambda: sdk.files.read("/workspace/bench/read_sdk.txt"), n
        ),
        "e2b_sdk_bash_true": await micro(lambda: sdk.commands.run("true"), n),
    }


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    """Start or reach the host, run the benchmark."""
    async with sandbox_host(args.url, args.api_key) as (base, key):
        return await bench(base, key, args.iterations, args.micro)


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="sandbox host base URL (default: start one)")
    parser.add_argument("--api-key", help="sandbox host API key")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--micro", type=int, default=200)
    args = parser.parse_args(argv)
    report = asyncio.run(amain(args))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
