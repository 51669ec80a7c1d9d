"""The scripted model: script parsing, position from the conversation, streaming."""

from __future__ import annotations

import json

import pytest

from services.pool.errors import ScriptError
from services.pool.models.base import Finish, TextDelta, ThoughtDelta, ToolRequest
from services.pool.models.demo import DEMO_SCRIPT
from services.pool.models.scripted import (
    Say,
    ScriptedModel,
    Tool,
    parse_script,
    remaining_steps,
)


def prompt(*steps: dict[str, object]) -> str:
    return json.dumps({"script": list(steps)})


def test_any_other_prompt_runs_the_demo_reference_task() -> None:
    steps = parse_script("please build a calculator")
    tools = [s.tool for s in steps if isinstance(s, Tool)]
    assert len(steps) == len(DEMO_SCRIPT)
    assert tools == [
        "ls", "write", "write", "read", "edit", "write",
        "grep", "glob", "bash", "bash", "read", "bash",
        "terminal", "code", "lsp",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"script": "nope"}', "script"),
        ('{"script": [{"dance": 1}]}', "script[0]"),
        ('{"script": [{"say": "ok"}, {"tool": 3}]}', "script[1]"),
        ('{"script": [{"say": "ok", "extra": 1}]}', "script[0]"),
    ],
)
def test_malformed_scripts_name_the_step_at_fault(text: str, where: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(text)
    assert str(info.value).startswith(where + ":")


def test_the_position_is_the_tool_results_since_the_last_user_message() -> None:
    text = prompt(
        {"say": "a"}, {"tool": "ls"}, {"say": "b"}, {"tool": "read"}, {"say": "c"}
    )
    history = [{"role": "user", "content": "old"}, {"role": "tool", "content": "x"}]
    messages = [*history, {"role": "user", "content": text}]
    assert remaining_steps(messages)[0] == Say("a")
    messages += [
        {"role": "assistant", "content": "a"},
        {"role": "tool", "content": "1"},
    ]
    assert remaining_steps(messages)[0] == Say("b")
    messages += [{"role": "tool", "content": "2"}]
    assert remaining_steps(messages) == [Say("c")]


async def test_a_response_streams_words_up_to_one_tool_call() -> None:
    model = ScriptedModel()
    text = prompt(
        {"think": "hmm ok"},
        {"say": "one two"},
        {"say": "three"},
        {"tool": "ls", "args": {"path": "."}},
        {"say": "after"},
    )
    chunks = [c async for c in model.stream([{"role": "user", "content": text}], [])]
    thought = "".join(c.text for c in chunks if isinstance(c, ThoughtDelta))
    said = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert thought == "hmm ok"
    assert said == "one two\n\nthree"
    assert sum(isinstance(c, TextDelta) for c in chunks) == 4
    call = next(c for c in chunks if isinstance(c, ToolRequest))
    assert call.name == "ls"
    assert json.loads(call.arguments) == {"path": "."}
    assert isinstance(chunks[-1], Finish)
    assert chunks[-1].reason == "tool_calls"
    assert chunks[-1].output_tokens > 0
