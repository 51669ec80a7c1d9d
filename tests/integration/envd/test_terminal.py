"""The persistent terminal against the real local sandbox host."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.envd import EnvdClient, EnvdInvalidArgument
from services.envd.terminal import Terminals
from tests.contract.envd.sandboxes import SandboxRef, sandbox
from tests.plugins.sandboxhost import sandboxhost  # noqa: F401 - fixture


@pytest.fixture
async def ref(sandboxhost: object) -> AsyncIterator[SandboxRef]:  # noqa: F811
    """A fresh sandbox per test."""
    async with sandbox(sandboxhost) as created:
        yield created


def _client(ref: SandboxRef) -> EnvdClient:
    return EnvdClient(ref.url, ref.sandbox_id, ref.access_token)


async def test_state_survives_calls_and_a_new_client(ref: SandboxRef) -> None:
    """cd and export stay; a second client (another worker) reattaches by tag."""
    async with _client(ref) as first:
        terms = Terminals(lambda: first)
        started = await terms.call("main", "cd /tmp && export AB_X=forty-two")
        assert started.started
        assert not started.running
        shown: list[str] = []

        async def live(text: str) -> None:
            shown.append(text)

        out = await terms.call("main", "echo $AB_X; pwd", on_output=live)
        assert not out.started
        assert "forty-two\n/tmp" in out.output
        assert "forty-two" in "".join(shown)
        assert "\x1b" not in out.output
    async with _client(ref) as second:
        again = Terminals(lambda: second)
        out = await again.call("main", "echo $AB_X in $(pwd)")
        assert not out.started
        assert "forty-two in /tmp" in out.output


async def test_output_between_calls_is_kept_and_bounded(ref: SandboxRef) -> None:
    """What a background job prints after a call is read by the next one."""
    async with _client(ref) as client:
        terms = Terminals(lambda: client, cap=2048)
        await terms.call("main", "(sleep 0.3; echo late-line) &")
        later = await terms.call("main", "wait; echo waited")
        assert "late-line" in later.output
        assert "waited" in later.output
        big = await terms.call("main", "seq 1 5000")
        assert big.truncated
        assert "bytes of output not shown" in big.output
        assert big.output.rstrip().endswith("$")
        assert "\n1\n" in big.output
        assert "5000" in big.output


async def test_running_program_then_control_c(ref: SandboxRef) -> None:
    """A program still running is reported; Ctrl-C gets the prompt back."""
    async with _client(ref) as client:
        terms = Terminals(lambda: client)
        out = await terms.call("main", "sleep 30", wait_ms=200)
        assert out.running
        back = await terms.call("main", "\x03", wait_ms=5000)
        assert not back.running


async def test_close_and_bad_id(ref: SandboxRef) -> None:
    """Close kills the shell; a new call starts a fresh one (cwd reset)."""
    async with _client(ref) as client:
        terms = Terminals(lambda: client)
        await terms.call("t2", "cd /tmp")
        closed = await terms.call("t2", close=True)
        assert closed.closed
        fresh = await terms.call("t2", "pwd")
        assert fresh.started
        assert "/workspace" in fresh.output
        with pytest.raises(EnvdInvalidArgument, match="bad terminal id"):
            await terms.call("../x", "pwd")


async def test_a_shell_gone_with_its_sandbox_is_reported(
    ref: SandboxRef,
    sandboxhost: object,  # noqa: F811
) -> None:
    """The same terminals on a rebuilt sandbox (a new one): 'lost', fresh state."""
    async with (
        sandbox(sandboxhost) as rebuilt,
        _client(ref) as old,
        _client(rebuilt) as new,
    ):
        current = [old]
        terms = Terminals(lambda: current[0])
        await terms.call("main", "export KEPT=yes")
        current[0] = new
        out = await terms.call("main", 'echo "kept=[$KEPT]"')
        assert out.started
        assert out.lost
        assert "kept=[]" in out.output


async def test_the_transcript_is_rotated_so_a_chatty_program_cannot_fill_the_disk(
    ref: SandboxRef,
) -> None:
    """Two generations of at most ``rotate`` bytes; what rotated away unread is
    said to be dropped; reading goes on across a rotation without loss."""
    async with _client(ref) as client:
        terms = Terminals(lambda: client, cap=2048, rotate=8192)
        await terms.call("main", "echo ready")
        across = await terms.call("main", "seq 1 1200; echo across-mark")  # ~5 KB
        assert "across-mark" in across.output
        more = await terms.call("main", "seq 5001 5900; echo second-mark")  # rotates
        assert "dropped" not in more.output, "one rotation loses nothing unread"
        assert more.output.startswith("seq 5001 5900; echo second-mark\n5001\n")
        assert "5900\nsecond-mark\n" in more.output
        gen = await client.run("cat /tmp/agentbus-term/main.gen")
        assert gen.stdout == b"1", "the log was rotated once during that call"
        assert "across-mark" not in more.output
        flood = await terms.call("main", "seq 1 30000; echo end-mark", wait_ms=20000)
        assert "end-mark" in flood.output
        assert "earlier output was dropped unread" in flood.output
        sizes = await client.run(
            "cd /tmp/agentbus-term && stat -c %s main.log main.log.1 && cat main.gen"
        )
        log_size, old_size, gen = sizes.stdout.decode().split()
        assert int(log_size) <= 8192
        assert int(old_size) <= 8192
        assert int(gen) >= 10
        after = await terms.call("main", "echo after-mark")
        assert "after-mark" in after.output
        assert "end-mark" not in after.output
        assert "dropped" not in after.output
