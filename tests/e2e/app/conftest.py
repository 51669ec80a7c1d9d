"""`agentbus up` on free ports for the App's tests (browser and terminal clients)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from services.common.natsserver import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class Stack:
    """`agentbus up` in a temp dir on free ports (every service a real process)."""

    def __init__(self, tmp_path: Path) -> None:
        self.data_dir = tmp_path / "data"
        self.log_path = tmp_path / "up.log"
        self.http = f"127.0.0.1:{free_port()}"
        self.base = f"http://{self.http}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env |= {
            "AGENTBUS_NATS_PORT": str(free_port()),
            "AGENTBUS_SANDBOXHOST_LISTEN": f"127.0.0.1:{free_port()}",
        }
        self.env = env
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.cli", "up", "--data-dir",
                 str(self.data_dir), "--http", self.http, "--workers", "1"],
                stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def token(self) -> str:
        for line in self.log().splitlines():
            if "device token:" in line:
                return line.split("device token:")[1].split()[0]
        raise AssertionError("no token in the banner")

    async def ready(self, timeout: float = 90.0) -> None:
        async with aiohttp.ClientSession() as http, asyncio.timeout(timeout):
            while True:
                assert self.proc.poll() is None, self.log()
                try:
                    async with http.get(f"{self.base}/healthz") as r:
                        if r.status == 200 and "device token:" in self.log():
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """One stack per test module."""
    s = Stack(tmp_path_factory.mktemp("up"))
    try:
        await s.ready()
        yield s
    finally:
        s.stop()


def chromium_or_skip() -> str:
    """The Debian chromium binary; a clear skip only if it is not installed."""
    path = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if path is None:
        pytest.skip(
            "Debian's chromium is not installed (scripts/setup.sh installs it as root)"
        )
    return path
