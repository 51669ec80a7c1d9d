"""Agent tools: round trips per call, version guard, workspace containment, caps."""

from __future__ import annotations

import asyncio

import pytest

from services.envd import (
    EditMismatch,
    EnvdNotFound,
    PathRefused,
    SandboxTools,
    StaleFileError,
)

OPS = """def add(a, b):
    return a + b


def mul(a, b):
    return a * b


def safe_div(a, b):
    return a / b
"""
TEST_OPS = """from calc.ops import safe_div


def test_div():
    assert safe_div(4, 2) == 2
"""


async def _rt(tools: SandboxTools, step: object) -> int:
    before = tools.client.round_trips
    await step  # type: ignore[misc]
    return tools.client.round_trips - before


async def test_reference_script_meets_round_trip_budgets(tools: SandboxTools) -> None:
    rts = [
        await _rt(tools, tools.ls("/workspace")),
        await _rt(tools, tools.write("calc/__init__.py", "")),
        await _rt(tools, tools.write("calc/ops.py", OPS)),
        await _rt(tools, tools.read("calc/ops.py")),
        await _rt(
            tools,
            tools.edit(
                "calc/ops.py",
                "    return a / b\n",
                '    if b == 0:\n        raise ValueError("division by zero")\n'
                "    return a / b\n",
            ),
        ),
        await _rt(tools, tools.write("tests/test_ops.py", TEST_OPS)),
        await _rt(tools, tools.grep("ValueError", "calc/")),
        await _rt(tools, tools.glob("**/*.py")),
        await _rt(tools, tools.bash("python3 -c 'import calc.ops'")),
        await _rt(tools, tools.bash("ls -la calc")),
        await _rt(tools, tools.read("tests/test_ops.py")),
        await _rt(tools, tools.bash("grep -rn safe_div .")),
    ]
    # ls, write(new)=Stat‖Stat(parent)+POST, read(cached)=GET, edit=GET+POST,
    # grep=run, glob=run, bash=run, read after a command (cache cleared)=
    # Stat‖Stat(parent)‖GET. Parents are Stat-ed in parallel: requests, not latency.
    assert rts == [1, 3, 2, 1, 2, 3, 1, 1, 1, 1, 3, 1]


async def test_reference_script_produces_the_expected_workspace(
    tools: SandboxTools,
) -> None:
    await tools.write("calc/__init__.py", "")
    await tools.write("calc/ops.py", OPS)
    await tools.read("calc/ops.py")
    await tools.edit(
        "calc/ops.py",
        "    return a / b\n",
        "    if b == 0:\n        raise ValueError('zero')\n    return a / b\n",
    )
    await tools.write("tests/test_ops.py", TEST_OPS)
    grep = await tools.grep("ValueError", "calc/")
    glob = await tools.glob("**/*.py")
    imported = await tools.bash(
        "python3 -c 'import calc.ops; print(calc.ops.mul(6, 7))'"
    )
    assert grep.exit_code == 0
    assert "calc/ops.py:" in grep.output
    assert glob.paths == ["calc/__init__.py", "calc/ops.py", "tests/test_ops.py"]
    assert (imported.exit_code, imported.output) == (0, "42\n")


async def test_read_returns_the_requested_line_window(tools: SandboxTools) -> None:
    await tools.write("n.txt", "".join(f"{i}\n" for i in range(1, 11)))
    window = await tools.read("n.txt", offset=3, limit=2)
    assert (
        window.content,
        window.start_line,
        window.line_count,
        window.total_lines,
    ) == (
        "3\n4\n",
        3,
        2,
        10,
    )


async def test_edit_of_a_file_changed_since_read_is_refused(
    tools: SandboxTools,
) -> None:
    await tools.write("f.py", "x = 1\n")
    await tools.read("f.py")
    await tools.bash("echo 'y = 2' >> f.py")
    with pytest.raises(StaleFileError) as caught:
        await tools.edit("f.py", "x = 1", "x = 3")
    assert caught.value.path == "f.py"
    assert "read it again" in str(caught.value)
    await tools.read("f.py")
    await tools.edit("f.py", "x = 1", "x = 3")
    assert (await tools.read("f.py")).content == "x = 3\ny = 2\n"


async def test_edit_needs_exactly_one_match(tools: SandboxTools) -> None:
    await tools.write("d.txt", "a a\n")
    with pytest.raises(EditMismatch) as many:
        await tools.edit("d.txt", "a", "b")
    with pytest.raises(EditMismatch) as none:
        await tools.edit("d.txt", "zzz", "b")
    assert (many.value.count, none.value.count) == (2, 0)


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "/home/user/.bashrc", "~/x"])
async def test_paths_outside_the_workspace_are_refused_before_any_request(
    tools: SandboxTools, bad: str
) -> None:
    with pytest.raises(PathRefused):
        await tools.read(bad)
    with pytest.raises(PathRefused):
        await tools.write(bad, "x")
    assert tools.client.round_trips == 0


async def test_symlinks_leading_out_of_the_workspace_are_refused(
    tools: SandboxTools,
) -> None:
    await tools.bash(
        "ln -s /etc/passwd leak; ln -s leak chain; mkdir d; ln -s /etc d/etc"
    )
    with pytest.raises(PathRefused):
        await tools.read("leak")
    with pytest.raises(PathRefused):
        await tools.read("chain")
    await tools.ls("d")
    with pytest.raises(PathRefused):
        await tools.read("d/etc/hostname")


async def test_an_uncached_symlinked_directory_is_refused_by_default(
    tools: SandboxTools,
) -> None:
    await tools.bash("mkdir -p d && ln -s /etc d/etc")
    with pytest.raises(PathRefused) as refused:
        await tools.read("d/etc/hostname")
    assert refused.value.code == "path_outside_workspace"
    lax = SandboxTools(tools.client, strict_parents=False)
    assert (await lax.read("d/etc/os-release")).content  # the old, trusting mode


async def test_missing_file_read_raises_not_found(tools: SandboxTools) -> None:
    with pytest.raises(EnvdNotFound):
        await tools.read("nope.txt")


async def test_bash_output_is_capped_for_the_model_and_spilled_whole(
    tools: SandboxTools,
) -> None:
    result = await tools.bash("seq 1 100000; echo oops >&2")
    assert result.truncated
    assert len(result.output.encode()) < tools.output_cap + 200
    assert result.output.startswith("1\n2\n3\n")
    assert result.output.endswith("100000\noops\n")
    assert result.spill_path is not None
    spilled = await tools.read(result.spill_path, limit=1_000_000)
    assert spilled.total_lines == 100001


async def test_bash_timeout_is_reported(tools: SandboxTools) -> None:
    result = await tools.bash("echo before; sleep 30", timeout_s=0.5)
    assert result.timed_out
    assert result.output == "before\n"


async def test_grep_without_match_and_glob_without_match_are_empty(
    tools: SandboxTools,
) -> None:
    await tools.write("a.txt", "hello\n")
    grep = await tools.grep("absent")
    glob = await tools.glob("**/*.rs")
    assert (grep.exit_code, grep.output) == (1, "")
    assert glob.paths == []


async def test_grep_and_glob_refuse_symlinked_dirs_outside_in_one_request(
    tools: SandboxTools,
) -> None:
    await tools.bash("ln -s /etc out")
    before = tools.client.round_trips
    with pytest.raises(PathRefused):
        await tools.grep("root", "out")
    with pytest.raises(PathRefused):
        await tools.glob("*", "out")
    assert tools.client.round_trips - before == 2


async def test_grep_in_a_missing_directory_raises_not_found(
    tools: SandboxTools,
) -> None:
    with pytest.raises(EnvdNotFound):
        await tools.grep("x", "no/such/dir")


async def test_background_command_holds_the_cache_generation_open_until_it_ends(
    tools: SandboxTools,
) -> None:
    generation = tools.cache.generation
    pid = await tools.bash_background("read -r x; echo got-$x")
    assert tools.cache.running == 1
    await tools.client.send_stdin(pid, b"y\n")
    result = await tools.client.wait(pid, timeout_s=10)
    assert result.stdout == b"got-y\n"
    assert tools.cache.running == 0
    assert tools.cache.generation == generation + 2


async def test_read_counts_lines_on_newlines_only(tools: SandboxTools) -> None:
    await tools.write("cr.txt", "a\rb\x0cc\nlast")
    result = await tools.read("cr.txt")
    assert (result.total_lines, result.content) == (2, "a\rb\x0cc\nlast")


async def test_edit_after_a_command_checks_the_path_and_guard_in_parallel(
    tools: SandboxTools,
) -> None:
    await tools.write("g.py", "v = 1\n")
    await tools.bash("true")
    before = tools.client.round_trips
    await tools.edit("g.py", "v = 1", "v = 2")
    assert tools.client.round_trips - before == 3  # Stat ‖ GET, then POST
    assert (await tools.read("g.py")).content == "v = 2\n"


async def test_bash_streams_its_output_live_as_exact_text(tools: SandboxTools) -> None:
    parts: list[str] = []
    first = asyncio.Event()

    async def on_output(stream: str, text: str) -> None:
        assert stream == "stdout"  # stderr is merged
        parts.append(text)
        first.set()

    # The command waits for a file the test writes once the first line arrived,
    # so that line was delivered while the command was still running.
    command = (
        "echo first; while [ ! -e go ]; do sleep 0.01; done; "
        "for i in $(seq 1 3000); do printf 'é€😀'; done; echo; echo err >&2"
    )
    run = asyncio.create_task(tools.bash(command, on_output=on_output))
    await asyncio.wait_for(first.wait(), 10)
    assert not run.done()
    assert "".join(parts) == "first\n"
    await tools.write("go", "")
    result = await asyncio.wait_for(run, 30)
    live = "".join(parts)
    assert "\ufffd" not in live
    assert live == "first\n" + "é€😀" * 3000 + "\nerr\n"
    assert result.output == live
