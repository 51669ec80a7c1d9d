"""The Anthropic Messages wire format: requests from the fold's messages, events.

The conversation fold keeps OpenAI-shaped messages (``system``, ``user``,
``assistant`` with ``tool_calls``, ``tool``); :func:`to_anthropic` turns them
into Messages API content blocks (``tool_use``, ``tool_result``), merging
consecutive messages of one role as the API requires. :class:`EventReader`
turns streamed events into model chunks and checks the response really ended
(``message_stop``).
"""

from __future__ import annotations

import json
from typing import Any

from services.pool.errors import ModelError
from services.pool.models.base import (
    Finish,
    Message,
    ModelChunk,
    TextDelta,
    ThoughtDelta,
    ToolRequest,
)
from services.pool.models.stream import BrokenStream, decode, estimate_tokens

Block = dict[str, Any]
EPHEMERAL = {"type": "ephemeral"}
# Anthropic's stop reasons in the OpenAI names the rest of the pool uses.
STOP = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


def to_anthropic(messages: list[Message]) -> tuple[str, list[Block]]:
    """``(system, messages)`` for the Messages API."""
    system = "\n\n".join(
        str(m.get("content") or "") for m in messages if m.get("role") == "system"
    )
    out: list[Block] = []
    for message in messages:
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return system, out


def _blocks(message: Message) -> tuple[str, list[Block]]:
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        result = {
            "type": "tool_result",
            "tool_use_id": message.get("tool_call_id"),
            "content": str(content or ""),
        }
        return "user", [result]
    if role not in ("user", "assistant"):
        return "", []
    blocks: list[Block] = [{"type": "text", "text": content}] if content else []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": _input(function.get("arguments")),
            }
        )
    return str(role), blocks


def _input(arguments: Any) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return {"_raw": str(arguments)}
    return value if isinstance(value, dict) else {"_raw": value}


def to_tools(tools: list[dict[str, Any]]) -> list[Block]:
    """OpenAI function specs as Anthropic tools."""
    out = []
    for tool in tools:
        function = tool.get("function") or tool
        out.append(
            {
                "name": function.get("name"),
                "description": function.get("description") or "",
                "input_schema": function.get("parameters") or {"type": "object"},
            }
        )
    return out


def mark_cache(messages: list[Block], tools: list[Block]) -> None:
    """Prompt-cache breakpoints on the tools and on the conversation so far.

    With the system prompt's, three of the API's four breakpoints: each request
    reads the prefix the previous one wrote.
    """
    if tools:
        tools[-1]["cache_control"] = EPHEMERAL
    if messages and messages[-1]["content"]:
        messages[-1]["content"][-1]["cache_control"] = EPHEMERAL


class EventReader:
    """One attempt's events → model chunks; :meth:`end` checks it ended."""

    def __init__(self, model: str, prompt: int) -> None:
        self.model = model
        self.prompt = prompt
        self.usage: dict[str, Any] = {}
        self.reason = ""
        self.output = 0
        self.done = False
        self.tools: dict[int, dict[str, str]] = {}
        self.thinking: list[Block] = []

    def feed(self, data: str) -> list[ModelChunk]:
        doc = decode(data)
        if not isinstance(doc, dict):
            raise BrokenStream("malformed", f"not an event object: {data[:200]}")
        kind = doc.get("type")
        if kind == "message_start":
            message = doc.get("message") or {}
            self.model = str(message.get("model") or self.model)
            self.usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            self._start(int(doc.get("index", 0)), doc.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._delta(int(doc.get("index", 0)), doc.get("delta") or {})
        elif kind == "message_delta":
            self.reason = (doc.get("delta") or {}).get("stop_reason") or self.reason
            self.usage.update(doc.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            _error(doc)
        return []

    def _start(self, index: int, block: Block) -> None:
        if block.get("type") == "tool_use":
            self.tools[index] = {
                "id": str(block.get("id") or f"toolu_{index}"),
                "name": str(block.get("name") or ""),
                "json": "",
            }
        elif block.get("type") in ("thinking", "redacted_thinking"):
            self.thinking.append(dict(block))

    def _delta(self, index: int, delta: Block) -> list[ModelChunk]:
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            self.output += estimate_tokens(delta["text"])
            return [TextDelta(delta["text"])]
        if kind == "thinking_delta" and delta.get("thinking"):
            self.output += estimate_tokens(delta["thinking"])
            if self.thinking:
                self.thinking[-1]["thinking"] += delta["thinking"]
            return [ThoughtDelta(delta["thinking"])]
        if kind == "signature_delta" and self.thinking:
            self.thinking[-1]["signature"] = delta.get("signature") or ""
        if kind == "input_json_delta" and index in self.tools:
            fragment = str(delta.get("partial_json") or "")
            self.tools[index]["json"] += fragment
            self.output += estimate_tokens(fragment)
        return []

    def end(self) -> list[ModelChunk]:
        if not self.done:
            raise BrokenStream("truncated", "the stream ended without message_stop")
        calls: list[ModelChunk] = [
            ToolRequest(t["id"], t["name"], t["json"] or "{}")
            for _, t in sorted(self.tools.items())
        ]
        return [*calls, self._finish()]

    def _finish(self) -> Finish:
        usage = self.usage
        read = int(usage.get("cache_read_input_tokens") or 0)
        written = int(usage.get("cache_creation_input_tokens") or 0)
        given = "input_tokens" in usage
        fresh = int(usage.get("input_tokens") or 0) if given else self.prompt
        output = usage.get("output_tokens")
        return Finish(
            STOP.get(self.reason, self.reason or "stop"),
            fresh + read + written,
            int(output) if output is not None else self.output,
            cached_input_tokens=read,
            estimated=not given or output is None,
            model=self.model,
        )


def _error(doc: dict[str, Any]) -> None:
    error = doc.get("error") or {}
    kind = str(error.get("type") or "error")
    message = str(error.get("message") or kind)
    if kind in RETRYABLE_ERRORS:
        raise BrokenStream(kind, f"error event: {message}")
    raise ModelError("model_error", message)
