"""EnvdClient process contract: streaming run, exact bytes, caps, kill, stdin."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import pytest

from services.envd import (
    EnvdClient,
    EnvdInvalidArgument,
    EnvdNotFound,
    OutputChunk,
    Utf8Stream,
)

# Count live processes whose command line contains a marker; the [x] trick keeps
# the counting pipeline itself from matching.
_COUNT = (
    "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"
    " | grep -c '^[{first}]{rest}' || true"
)


def _marker() -> tuple[str, str]:
    """A unique ``sleep`` duration to find the processes of one test."""
    n = 300 + int(uuid.uuid4().int % 10_000) / 1000
    return f"sleep {n}", _COUNT.format(first="s", rest=f"leep {n}")


async def _live(client: EnvdClient, count_cmd: str) -> int:
    return int((await client.run(count_cmd)).stdout.strip() or b"0")


async def _settled_count(client: EnvdClient, count_cmd: str) -> int:
    """Poll until no matching process remains (or give up after ~3 s)."""
    for _ in range(30):
        if (n := await _live(client, count_cmd)) == 0:
            return 0
        await asyncio.sleep(0.1)
    return n


async def test_run_streams_exit_code_stdout_stderr_in_one_request(
    client: EnvdClient,
) -> None:
    result = await client.run("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert result.pid > 0
    assert not result.truncated
    assert client.round_trips == 1


async def test_run_honours_cwd_and_envs(client: EnvdClient) -> None:
    result = await client.run('pwd; echo "$FOO"', cwd="/tmp", envs={"FOO": "b a r"})
    assert result.stdout == b"/tmp\nb a r\n"


async def test_run_in_a_missing_cwd_raises_invalid_argument(client: EnvdClient) -> None:
    with pytest.raises(EnvdInvalidArgument):
        await client.run("true", cwd="/no/such/dir")


async def test_utf8_character_split_across_chunks_arrives_exact(
    client: EnvdClient,
) -> None:
    chunks: list[OutputChunk] = []

    async def on_output(chunk: OutputChunk) -> None:
        chunks.append(chunk)

    cmd = (
        "printf 'caf\\303'; sleep 0.3; printf '\\251 \\360\\237'; sleep 0.3;"
        " printf '\\230\\200'"
    )
    result = await client.run(cmd, on_output=on_output)
    assert result.stdout == "café 😀".encode()
    assert len(chunks) >= 2
    decoder = Utf8Stream()
    text = "".join(decoder.feed(c.data) for c in chunks) + decoder.flush()
    assert text == "café 😀"
    assert "\ufffd" not in text


async def test_large_binary_output_is_byte_exact(client: EnvdClient) -> None:
    script = (
        "python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 4096)'"
    )
    result = await client.run(script)
    expected = bytes(range(256)) * 4096
    assert len(result.stdout) == len(expected)
    assert hashlib.sha256(result.stdout).digest() == hashlib.sha256(expected).digest()


async def test_output_over_the_cap_is_spilled_whole_to_a_sandbox_file(
    client: EnvdClient,
) -> None:
    script = "for i in $(seq 1 20000); do echo line-$i; done; echo tail-err >&2"
    result = await client.run(script, output_cap=1000)
    full = "".join(f"line-{i}\n" for i in range(1, 20001)).encode()
    assert result.truncated
    assert result.stdout == full[:1000]
    assert result.total_bytes == len(full) + len(b"tail-err\n")
    assert result.spill_path is not None
    assert client.round_trips == 2  # the command, then one upload of the spill file
    spilled = await client.read_bytes(result.spill_path)
    assert spilled.replace(b"tail-err\n", b"") == full
    assert result.tail.endswith(b"\n")


async def test_timeout_kills_the_whole_process_group_and_returns(
    client: EnvdClient,
) -> None:
    sleep, count = _marker()
    loop = asyncio.get_running_loop()
    began = loop.time()
    result = await client.run(f"{sleep} & {sleep} & echo started; wait", timeout_s=0.5)
    assert result.timed_out
    assert result.stdout == b"started\n"
    assert loop.time() - began < 5
    assert await _settled_count(client, count) == 0


async def test_cancelling_run_kills_the_process_group_promptly(
    client: EnvdClient,
) -> None:
    sleep, count = _marker()
    started = asyncio.Event()

    async def on_output(chunk: OutputChunk) -> None:
        started.set()

    task = asyncio.create_task(
        client.run(f"{sleep} & {sleep} & echo started; wait", on_output=on_output)
    )
    await asyncio.wait_for(started.wait(), 10)
    assert await _live(client, count) == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert await _settled_count(client, count) == 0


async def test_background_command_takes_stdin_and_reports_its_end(
    client: EnvdClient,
) -> None:
    pid = await client.start_background('read -r line; echo "got:$line"')
    await client.send_stdin(pid, b"hello\n")
    result = await client.wait(pid, timeout_s=10)
    assert (result.exit_code, result.stdout) == (0, b"got:hello\n")


async def test_close_stdin_delivers_eof(client: EnvdClient) -> None:
    pid = await client.start_background("cat; echo done")
    await client.send_stdin(pid, b"abc")
    await client.close_stdin(pid)
    result = await client.wait(pid, timeout_s=10)
    assert result.stdout == b"abcdone\n"


async def test_kill_stops_a_background_group_and_unknown_pids_answer_false(
    client: EnvdClient,
) -> None:
    sleep, count = _marker()
    exited: list[int] = []
    pid = await client.start_background(
        f"{sleep} & {sleep}; wait", on_exit=lambda r: exited.append(r.exit_code)
    )
    assert await client.kill(pid) is True
    result = await client.wait(pid, timeout_s=10)
    assert result.exit_code != 0
    assert exited == [result.exit_code]
    assert await _settled_count(client, count) == 0
    assert await client.kill(pid) is False


async def test_background_command_past_its_lifetime_is_reported_timed_out(
    client: EnvdClient,
) -> None:
    sleep, count = _marker()
    pid = await client.start_background(f"echo up; {sleep}", timeout_s=0.5)
    result = await client.wait(pid, timeout_s=10)
    assert result.timed_out
    assert result.stdout == b"up\n"
    assert await _settled_count(client, count) == 0


async def test_wait_for_an_unknown_background_pid_raises_not_found(
    client: EnvdClient,
) -> None:
    with pytest.raises(EnvdNotFound):
        await client.wait(999_999)
