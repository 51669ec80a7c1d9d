"""The worker's fold: model messages in turn order, queue, resumability."""

from __future__ import annotations

from schemas.events import (
    AgentMessage,
    AgentMessageDelta,
    AgentMessageDiscarded,
    Event,
    Payload,
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
from services.pool.conversation import Conversation


def fold(*payloads: Payload) -> Conversation:
    conv = Conversation()
    for seq, payload in enumerate(payloads, 1):
        conv.apply(
            Event(
                session_id="s",
                seq=seq,
                id=f"e{seq}",
                type=payload.TYPE,
                ts="t",
                actor="x",
                data=payload,
            )
        )
    return conv


def test_a_prompt_queued_during_a_turn_joins_the_messages_when_its_turn_starts() -> (
    None
):
    conv = fold(
        UserPrompt(text="one", turn_id="t1"),
        TurnStarted(turn_id="t1", prompt_seq=1),
        UserPrompt(text="two", turn_id="t2"),
        AgentMessage(turn_id="t1", text="answer one"),
        TurnEnded(turn_id="t1", stop_reason="end_turn"),
        TurnStarted(turn_id="t2", prompt_seq=3),
    )
    assert conv.messages == [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "answer one"},
        {"role": "user", "content": "two"},
    ]
    assert conv.queue == []
    assert conv.turn is not None
    assert conv.turn.turn_id == "t2"


def test_tool_calls_attach_to_the_assistant_message_and_results_follow() -> None:
    conv = fold(
        UserPrompt(text="go", turn_id="t1"),
        TurnStarted(turn_id="t1", prompt_seq=1),
        AgentMessage(turn_id="t1", text="listing"),
        ToolCall(turn_id="t1", call_id="c1", tool="ls", args={"path": "."}),
        ToolResult(call_id="c1", ok=True, output="a\nb"),
        ToolCall(turn_id="t1", call_id="c2", tool="read", args={"path": "a"}),
        ToolResult(call_id="c2", ok=False, error="missing"),
    )
    assistant = conv.messages[1]
    assert assistant["content"] == "listing"
    assert assistant["tool_calls"][0]["id"] == "c1"
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"path": "."}'
    assert conv.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "a\nb"}
    assert conv.messages[3]["content"] is None
    assert conv.messages[3]["tool_calls"][0]["id"] == "c2"
    assert conv.messages[4]["content"] == "error: missing"


def test_a_turn_ended_mid_tool_answers_the_dangling_call_for_the_model() -> None:
    conv = fold(
        UserPrompt(text="go", turn_id="t1"),
        TurnStarted(turn_id="t1", prompt_seq=1),
        ToolCall(turn_id="t1", call_id="c1", tool="bash", args={}),
        TurnEnded(turn_id="t1", stop_reason="worker_lost"),
    )
    assert conv.messages[-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "error: not run (turn ended: worker_lost)",
    }
    assert conv.turn is None
    assert not conv.has_work


def test_a_turn_waiting_only_for_a_person_is_resumable_one_mid_tool_is_not() -> None:
    base = (
        UserPrompt(text="go", turn_id="t1"),
        TurnStarted(turn_id="t1", prompt_seq=1),
        ToolCall(turn_id="t1", call_id="c1", tool="bash", args={}),
    )
    asked = PermissionRequested(
        request_id="r1", turn_id="t1", call_id="c1", tool="bash"
    )
    assert not fold(*base).resumable()
    waiting = fold(*base, asked)
    assert waiting.resumable()
    answered = fold(
        *base, asked, PermissionResolved(request_id="r1", option="allow_once")
    )
    assert answered.resumable()
    assert answered.turn is not None
    assert answered.turn.answers == {"r1": "allow_once"}
    running = ToolUpdate(call_id="c1", stream="status", text="running")
    started = fold(
        *base, asked, PermissionResolved(request_id="r1", option="allow_once"), running
    )
    assert not started.resumable()


def test_only_the_first_open_call_decides_resumability() -> None:
    conv = fold(
        UserPrompt(text="go", turn_id="t1"),
        TurnStarted(turn_id="t1", prompt_seq=1),
        ToolCall(turn_id="t1", call_id="c1", tool="bash", args={}),
        ToolCall(turn_id="t1", call_id="c2", tool="read", args={}),
        PermissionRequested(request_id="r1", turn_id="t1", call_id="c1", tool="bash"),
    )
    assert conv.resumable()
    assert conv.messages[-1]["tool_calls"][1]["id"] == "c2"


def test_cancels_policies_and_close_are_folded() -> None:
    conv = fold(
        UserPrompt(text="a", turn_id="t1"),
        TurnCancelRequested(turn_id="t1"),
        PolicyUpdated(tool="bash", decision="allow"),
        TurnEnded(turn_id="t1", stop_reason="cancelled"),
        SessionClosed(),
    )
    assert conv.cancelled == {"t1"}
    assert conv.policies == {"bash": "allow"}
    assert conv.queue == []
    assert conv.closed
    assert conv.messages == []
    assert conv.model_messages("sys")[0] == {"role": "system", "content": "sys"}


def test_a_discarded_response_leaves_only_the_retried_answer() -> None:
    conv = fold(
        UserPrompt(text="q", turn_id="t1"),
        TurnStarted(turn_id="t1", prompt_seq=1),
        AgentMessageDelta(turn_id="t1", text="half an "),
        AgentMessageDelta(turn_id="t1", text="ans"),
        AgentMessageDiscarded(turn_id="t1", attempt=1, cause="truncated"),
        AgentMessageDelta(turn_id="t1", text="the whole "),
    )
    assert conv.turn is not None
    assert conv.turn.streamed == "the whole "
    assert conv.turn.discarded == 1
    conv.apply(
        Event(
            session_id="s",
            seq=7,
            id="e7",
            type="agent.message",
            ts="t",
            actor="x",
            data=AgentMessage(turn_id="t1", text="the whole answer"),
        )
    )
    assert conv.turn.streamed == ""
    assert conv.messages == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "the whole answer"},
    ]


def test_a_discard_of_another_turn_is_ignored() -> None:
    conv = fold(
        UserPrompt(text="q", turn_id="t1"),
        TurnStarted(turn_id="t1", prompt_seq=1),
        AgentMessageDelta(turn_id="t1", text="kept"),
        AgentMessageDiscarded(turn_id="t0", attempt=1),
    )
    assert conv.turn is not None
    assert (conv.turn.streamed, conv.turn.discarded) == ("kept", 0)
