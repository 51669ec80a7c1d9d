"""The scripted model: deterministic, embedded, the test driver and the default.

A prompt whose text is JSON ``{"script": [step, ...]}`` runs those steps in
order; each step is ``{"say": str}``, ``{"think": str}`` or ``{"tool": name,
"args": {...}}``. Any other prompt runs the demo (the reference task). The
position in the script is derived from the conversation (tool results since the
last user message), so a turn resumed on another worker continues where it was.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from schemas.ids import new_id
from services.pool.errors import ScriptError
from services.pool.models.base import (
    Finish,
    Message,
    ModelChunk,
    TextDelta,
    ThoughtDelta,
    ToolRequest,
)
from services.pool.models.demo import DEMO_SCRIPT

_WORD = re.compile(r"\S+\s*|\s+")


class Say(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Answer text."""

    say: str


class Think(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Reasoning text."""

    think: str


class Tool(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tool call."""

    tool: str
    args: dict[str, Any] = {}


Step = Say | Think | Tool


def parse_script(text: str) -> list[Step]:
    """The steps of a scripted prompt, or the demo's for any other text."""
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or "script" not in doc:
        return [_step(raw, i) for i, raw in enumerate(DEMO_SCRIPT)]
    raw_steps = doc["script"]
    if not isinstance(raw_steps, list):
        raise ScriptError(None, "expected a list of steps")
    return [_step(raw, i) for i, raw in enumerate(raw_steps)]


def _step(raw: Any, index: int) -> Step:
    if not isinstance(raw, dict):
        raise ScriptError(index, "expected an object")
    kinds: tuple[tuple[str, type[Step]], ...] = (
        ("say", Say),
        ("think", Think),
        ("tool", Tool),
    )
    for key, kind in kinds:
        if key in raw:
            try:
                return msgspec.convert(raw, kind)
            except msgspec.ValidationError as exc:
                raise ScriptError(index, str(exc)) from exc
    raise ScriptError(index, 'expected one of "say", "think" or "tool"')


def remaining_steps(messages: list[Message]) -> list[Step]:
    """The steps after the tool calls already answered in the current turn."""
    last_user = max(
        (i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1
    )
    if last_user < 0:
        return []
    steps = parse_script(str(messages[last_user].get("content") or ""))
    done = sum(1 for m in messages[last_user + 1 :] if m.get("role") == "tool")
    for index, step in enumerate(steps):
        if done == 0:
            return steps[index:]
        if isinstance(step, Tool):
            done -= 1
    return []


class ScriptedModel:
    """A :class:`ModelClient` that plays scripts, word by word."""

    def __init__(self, token_delay_s: float = 0.0) -> None:
        self.token_delay_s = token_delay_s

    async def stream(
        self, messages: list[Message], tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelChunk]:
        """One response: the next run of say/think steps, up to one tool call."""
        output = 0
        started = {True: False, False: False}
        for step in remaining_steps(messages):
            match step:
                case Tool():
                    output += 1
                    args = json.dumps(step.args)
                    yield ToolRequest(new_id("call"), step.tool, args)
                    yield Finish("tool_calls", _input_tokens(messages), output)
                    return
                case Say() | Think():
                    answer = isinstance(step, Say)
                    text = step.say if isinstance(step, Say) else step.think
                    # Consecutive steps of one kind read as paragraphs.
                    text = ("\n\n" if started[answer] else "") + text
                    started[answer] = True
                    async for chunk in self._words(text, answer):
                        output += 1
                        yield chunk
        yield Finish("stop", _input_tokens(messages), output)

    async def _words(self, text: str, answer: bool) -> AsyncIterator[ModelChunk]:
        words = _WORD.findall(text)
        for word in words:
            yield TextDelta(word) if answer else ThoughtDelta(word)
            # Yield to the loop even without a delay: a cancel lands mid-stream.
            await asyncio.sleep(self.token_delay_s)

    async def close(self) -> None:
        """Nothing to release."""


def _input_tokens(messages: list[Message]) -> int:
    # A rough count (4 characters a token), enough for usage accounting.
    return sum(len(str(m.get("content") or "")) for m in messages) // 4
