"""`agentbus chat` through a pty against a real `agentbus up` stack."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from .conftest import Stack

pexpect = pytest.importorskip("pexpect")

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[3]
WAIT_S = 90


def spawn(stack: Stack, *args: str):
    env = {**stack.env, "AGENTBUS_HTTP": stack.http, "NO_COLOR": "1"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "services.cli", "chat", *args],
        cwd=str(ROOT),
        env=env,
        encoding="utf-8",
        timeout=WAIT_S,
        dimensions=(50, 200),
    )
    child.logfile_read = io.StringIO()  # everything the terminal showed
    return child


def gateway_pid(stack: Stack) -> int:
    """The gateway child of this stack's `agentbus up` (found by its argv)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gateway" in argv and str(stack.data_dir).encode() in argv:
            return int(proc.name)
    raise AssertionError("no gateway process")


async def log_of(stack: Stack, sid: str) -> list[dict]:
    headers = {"Authorization": f"Bearer {stack.token()}"}
    url = f"{stack.base}/v1/sessions/{sid}/events?follow=0"
    async with aiohttp.ClientSession(headers=headers) as http, http.get(url) as r:
        text = await r.text()
    return [json.loads(x[6:]) for x in text.splitlines() if x.startswith("data: ")]


async def test_chat_runs_the_demo_answers_approvals_and_resumes_after_a_drop(stack):
    child = spawn(stack, "--data-dir", str(stack.data_dir), "--title", "pty")
    try:
        child.expect(r"session (s_[A-Za-z0-9]+) at ")
        sid = child.match.group(1)
        child.sendline("build me a calculator")
        child.expect_exact("you> build me a calculator")
        child.expect(r"\? allow bash")
        child.expect(r"\[1\] allow once")
        child.sendline("1")
        child.expect_exact("· answered: allow once")
        os.kill(gateway_pid(stack), signal.SIGKILL)  # the stream drops mid-turn
        child.expect_exact("· connection lost; reconnecting…")
        child.expect(r"· reconnected \(resumed after seq (\d+)\)")
        child.expect(r"\? allow bash")
        child.expect(r"\[2\] always allow")
        child.sendline("2")
        child.expect_exact("· answered: allow always")
        for tool in ("terminal", "code"):  # the demo's other exec tools ask too
            child.expect(rf"\? allow {tool}")
            child.expect(r"\[2\] always allow")
            child.sendline("2")
            child.expect_exact("· answered: allow always")
        child.expect_exact("— turn ended (end_turn)")
        child.sendline("/cancel")
        child.expect_exact("· no turn is running")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    screen = child.logfile_read.getvalue()
    events = await log_of(stack, sid)
    tools = [e["data"]["tool"] for e in events if e["type"] == "tool.call"]
    assert re.findall(r"^⚙ (\w+)", screen, re.M) == tools, "each call once, in order"
    assert screen.count("you> build me a calculator") == 1


async def test_chat_attaches_and_replays_each_event_once(stack):
    first = spawn(stack, "--data-dir", str(stack.data_dir), "--title", "replay")
    first.expect(r"session (s_[A-Za-z0-9]+) at ")
    sid = first.match.group(1)
    first.sendline("build me a calculator")
    first.expect(r"\? allow bash")
    first.sendline("2")  # always allow, here and for the demo's other exec tools
    for tool in ("terminal", "code"):
        first.expect(rf"\? allow {tool}")
        first.sendline("2")
    first.expect_exact("— turn ended (end_turn)")
    first.sendline("/quit")
    first.expect(pexpect.EOF)
    first.close()

    child = spawn(stack, sid, "--url", stack.base, "--token", stack.token())
    try:
        child.expect_exact(f"session {sid} at {stack.base}")
        child.expect_exact("— turn ended (end_turn)")
        replay = child.before
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    events = await log_of(stack, sid)
    calls = [e for e in events if e["type"] == "tool.call"]
    shown = re.findall(r"^⚙ (\w+)", replay, re.M)
    assert shown == [c["data"]["tool"] for c in calls], "each tool call once, in order"
    assert replay.count("you> build me a calculator") == 1


def test_chat_refuses_a_session_of_another_device(stack):
    other = spawn(stack, "s_00000000000000000000", "--data-dir",
                  str(stack.data_dir), "--device", "someone-else")  # fmt: skip
    other.expect(r"! session s_0+: 404")
    other.expect(pexpect.EOF)
    other.close()
    assert other.exitstatus == 1
