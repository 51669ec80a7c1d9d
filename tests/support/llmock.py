"""``llmock serve`` (PyPI; a chaos server for LLM clients) as a real process.

Its random faults are drawn from Python's global ``random``; the server runs in
an interpreter seeded first, so a test's faults repeat from run to run (up to
the order in which concurrent requests arrive).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

from services.common.natsserver import free_port

LLMOCK = Path(sys.executable).parent / "llmock"
SEEDED = (
    "import random, sys; random.seed(int(sys.argv[1])); "
    "sys.argv = ['llmock', *sys.argv[2:]]; "
    "from llmock.cli import app; app()"
)
# Every HTTP error and stream fault of issue 17, plus stalls. Chunks are paced
# (5 ms, like real generation) so the server sees a client hang up on a broken
# stream; unpaced, a short stream is all sent before the hang-up and llmock
# judges the retry of a malformed chunk as a new call (``malformed_chunk_ignored``).
CHAOS = [
    "--stream-chunk-delay-ms", "5",
    "--error-rate", "429=0.2", "--error-rate", "503=0.1",
    "--stream-fault", "disconnect=0.05", "--stream-fault", "truncate=0.05",
    "--stream-fault", "malformed=0.05", "--stream-fault", "stall=0.05",
    "--stream-stall-seconds", "5", "--tool-mode", "auto",
]  # fmt: skip


class LLMock:
    """One ``llmock serve`` on a free port; :meth:`report` runs ``llmock report``."""

    def __init__(self, log_path: Path, seed: int, flags: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        argv = [sys.executable, "-c", SEEDED, str(seed), "serve"]
        argv += ["--port", str(self.port), "--log-level", "warning", *flags]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    async def ready(self, timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout), aiohttp.ClientSession() as http:
            while self.proc.poll() is None:
                try:
                    async with http.get(f"{self.url}/health") as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
        raise RuntimeError(f"llmock exited: {self.log_path.read_text()[-2000:]}")

    async def every_stream_fault(self, after_chunks: int = 2) -> None:
        """Queue one of each stream fault for the next streamed responses.

        On top of the random chaos, so every kind is certainly exercised.
        """
        kinds = ("stall", "disconnect", "truncate", "malformed")
        behaviors = [
            {"type": "stream_fault", "kind": k, "after_chunks": after_chunks,
             "stall_seconds": 5}
            for k in kinds
        ]  # fmt: skip
        async with aiohttp.ClientSession() as http:
            url = f"{self.url}/_llmock/scenario"
            async with http.post(url, json={"behaviors": behaviors}) as resp:
                assert resp.status in (200, 201), await resp.text()

    async def faults(self) -> dict[str, int]:
        """Faults injected so far by label (``chaos:429``, ``stream:stall``...)."""
        url = f"{self.url}/_llmock/requests"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            records = (await resp.json())["requests"]
        out: dict[str, int] = {}
        for record in records:
            if record.get("fault"):
                kind = str(record["fault"]).split("@")[0]
                out[kind] = out.get(kind, 0) + 1
        return out

    def report(self, *flags: str) -> subprocess.CompletedProcess[str]:
        """``llmock report --url … <flags>`` (exit 1 when the client misbehaved)."""
        return subprocess.run(
            [str(LLMOCK), "report", "--url", self.url, *flags],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def verdict(self) -> dict[str, Any]:
        """The verdict as JSON (``llmock report --json``)."""
        out: dict[str, Any] = json.loads(self.report("--json").stdout)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
