"""The worker's fold of a session log: the model's messages and the turn queue.

One ``apply`` path for every event, in seq order, whether it comes from the
initial read (resume on any worker, any host) or from the live tail (including
the worker's own appends), so a resumed conversation equals a live one.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from schemas.events import (
    AgentMessage,
    AgentMessageDelta,
    AgentMessageDiscarded,
    AgentThoughtDelta,
    Event,
    OptionKind,
    PermissionRequested,
    PermissionResolved,
    PolicyUpdated,
    SessionClosed,
    ToolCall,
    ToolResult,
    ToolUpdate,
    TurnCancelRequested,
    TurnEnded,
    TurnStarted,
    UserPrompt,
)
from services.pool.models.base import Message


class Prompt(msgspec.Struct, frozen=True):
    """An accepted prompt: its seq, turn and text."""

    seq: int
    turn_id: str
    text: str


class OpenTurn(msgspec.Struct, kw_only=True):
    """The started, not yet ended turn and what it left unfinished."""

    turn_id: str
    prompt_seq: int
    calls: dict[str, ToolCall] = {}
    requests: dict[str, PermissionRequested] = {}
    answers: dict[str, OptionKind] = {}
    # Calls whose tool began to run (``tool.update`` status "running").
    running: set[str] = set()
    # What the App shows of the response being streamed: the deltas since the
    # last ``agent.message``, emptied by ``agent.message.discarded``.
    streamed: str = ""
    discarded: int = 0


def tool_content(result: ToolResult) -> str:
    """What the model reads for a tool result."""
    if result.ok:
        return result.output
    head = f"error: {result.error}" if result.error else "error"
    return f"{head}\n{result.output}" if result.output else head


class Conversation:
    """Mutable fold of one session log (only the owning worker holds one)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.queue: list[Prompt] = []
        self.turn: OpenTurn | None = None
        self.cancelled: set[str] = set()
        self.policies: dict[str, str] = {}
        self.closed = False
        self.last_seq = 0
        self._assistant_open = False

    @property
    def has_work(self) -> bool:
        """A prompt waits or a turn is open."""
        return bool(self.queue) or self.turn is not None

    def apply(self, event: Event) -> None:
        """Fold one more event (seq order)."""
        self.last_seq = event.seq
        data = event.data
        match data:
            case UserPrompt():
                self.queue.append(Prompt(event.seq, data.turn_id, data.text))
            case TurnStarted():
                self._started(data)
            case TurnCancelRequested():
                self.cancelled.add(data.turn_id)
            case TurnEnded():
                self._ended(data)
            case SessionClosed():
                self.closed = True
            case _:
                self._apply_step(data)

    def _apply_step(self, data: object) -> None:
        match data:
            case AgentMessage():
                self.messages.append({"role": "assistant", "content": data.text})
                self._assistant_open = True
                self._streaming(data)
            case AgentMessageDelta() | AgentThoughtDelta() | AgentMessageDiscarded():
                self._streaming(data)
            case ToolCall():
                self._tool_call(data)
            case ToolResult():
                self._tool_result(data)
            case PermissionRequested() | PermissionResolved():
                self._permission(data)
            case PolicyUpdated():
                self.policies[data.tool] = data.decision
            case ToolUpdate() if data.stream == "status" and self.turn is not None:
                self.turn.running.add(data.call_id)

    def _streaming(
        self,
        data: AgentMessage
        | AgentMessageDelta
        | AgentThoughtDelta
        | AgentMessageDiscarded,
    ) -> None:
        """Deltas of the open turn; a withdrawn response never reaches the model.

        Only ``agent.message`` (written once a response completed) enters the
        model's messages, so a discarded attempt's deltas leave no trace there.
        """
        turn = self.turn
        if turn is None or turn.turn_id != data.turn_id:
            return
        if isinstance(data, AgentMessageDelta):
            turn.streamed += data.text
        elif isinstance(data, AgentMessage):
            turn.streamed = ""
        elif isinstance(data, AgentMessageDiscarded):
            turn.streamed = ""
            turn.discarded += 1

    def _started(self, data: TurnStarted) -> None:
        prompt = next((p for p in self.queue if p.turn_id == data.turn_id), None)
        self.queue = [p for p in self.queue if p.turn_id != data.turn_id]
        self.turn = OpenTurn(turn_id=data.turn_id, prompt_seq=data.prompt_seq)
        text = prompt.text if prompt is not None else ""
        self.messages.append({"role": "user", "content": text})
        self._assistant_open = False

    def _tool_call(self, data: ToolCall) -> None:
        if not self._assistant_open:
            self.messages.append({"role": "assistant", "content": None})
            self._assistant_open = True
        call = {
            "id": data.call_id,
            "type": "function",
            "function": {"name": data.tool, "arguments": json.dumps(data.args)},
        }
        self.messages[-1].setdefault("tool_calls", []).append(call)
        if self.turn is not None:
            self.turn.calls[data.call_id] = data

    def _tool_result(self, data: ToolResult) -> None:
        if self.turn is not None and self.turn.calls.pop(data.call_id, None) is None:
            return  # a result for a call this fold never saw: not the model's
        self.messages.append(
            {
                "role": "tool",
                "tool_call_id": data.call_id,
                "content": tool_content(data),
            }
        )
        self._assistant_open = False

    def _permission(self, data: PermissionRequested | PermissionResolved) -> None:
        if self.turn is None:
            return
        if isinstance(data, PermissionRequested):
            self.turn.requests[data.request_id] = data
        elif data.request_id in self.turn.requests:
            self.turn.answers[data.request_id] = data.option

    def _ended(self, data: TurnEnded) -> None:
        self.queue = [p for p in self.queue if p.turn_id != data.turn_id]
        if self.turn is None or self.turn.turn_id != data.turn_id:
            return
        # Every tool call needs an answer before the next user message.
        for call_id in list(self.turn.calls):
            self.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": f"error: not run (turn ended: {data.stop_reason})",
                }
            )
        self.turn = None
        self._assistant_open = False

    def resumable(self) -> bool:
        """The open turn stopped only to wait for a person: it can go on.

        Calls run one at a time in order, so only the first unanswered call can
        have started: the turn goes on if that call was waiting for a permission
        and its tool never began to run; otherwise it may have half-run, and the
        turn is lost instead.
        """
        turn = self.turn
        if turn is None or not turn.calls:
            return False
        first = next(iter(turn.calls))
        asked = {r.call_id for r in turn.requests.values()}
        return first in asked and first not in turn.running

    def awaiting_person(self) -> bool:
        """The open turn waits for an answer that has not come yet."""
        turn = self.turn
        if turn is None or not self.resumable() or turn.turn_id in self.cancelled:
            return False  # a cancelled turn needs a worker to end it, not a person
        first = next(iter(turn.calls))
        asked = [r.request_id for r in turn.requests.values() if r.call_id == first]
        return not any(request_id in turn.answers for request_id in asked)

    def needs_worker(self) -> bool:
        """There is something a worker can do now (not just wait for a person)."""
        return self.has_work and not self.awaiting_person() and not self.closed

    def model_messages(self, system: str | None) -> list[dict[str, Any]]:
        """The messages for the next model call."""
        head = [{"role": "system", "content": system}] if system else []
        return head + self.messages
