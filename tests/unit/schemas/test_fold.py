"""The session summary fold: status, queue, permissions, sandbox."""

from __future__ import annotations

from eventstore.fold import fold
from schemas import (
    Event,
    PermissionRequested,
    PermissionResolved,
    SandboxState,
    SessionClosed,
    SessionCreated,
    TurnEnded,
    TurnStarted,
    UserPrompt,
)


def _events(*payloads):
    return [
        Event(
            session_id="s",
            seq=i,
            id=f"e{i}",
            type=p.TYPE,
            ts=f"t{i}",
            actor="x",
            data=p,
        )
        for i, p in enumerate(payloads, 1)
    ]


def test_new_session_is_idle_and_owned_by_its_device():
    s = fold(_events(SessionCreated(device_id="d1", title="t")))
    assert (s.status, s.device_id, s.last_seq, s.queued) == ("idle", "d1", 1, 0)


def test_prompts_queue_behind_the_running_turn_in_order():
    s = fold(
        _events(
            SessionCreated(device_id="d"),
            UserPrompt(text="a", turn_id="t1"),
            UserPrompt(text="b", turn_id="t2"),
            TurnStarted(turn_id="t1", prompt_seq=2),
        )
    )
    assert (s.status, s.queued, s.current_turn) == ("running", 1, "t1")
    s = fold(_events(TurnEnded(turn_id="t1", stop_reason="end_turn")), s)
    assert (s.status, s.queued, s.current_turn) == ("running", 1, "t2")


def test_open_permission_shows_awaiting_and_an_answer_clears_it():
    s = fold(
        _events(
            SessionCreated(device_id="d"),
            UserPrompt(text="a", turn_id="t1"),
            TurnStarted(turn_id="t1", prompt_seq=2),
            PermissionRequested(
                request_id="r1", turn_id="t1", call_id="c", tool="bash"
            ),
        )
    )
    assert s.status == "awaiting_permission"
    s = fold(_events(PermissionResolved(request_id="r1", option="allow_once")), s)
    assert s.status == "running"
    assert "r1" in s.resolved_permissions


def test_requests_left_open_by_an_ended_turn_count_as_resolved():
    s = fold(
        _events(
            UserPrompt(text="a", turn_id="t1"),
            TurnStarted(turn_id="t1", prompt_seq=1),
            PermissionRequested(
                request_id="r1", turn_id="t1", call_id="c", tool="bash"
            ),
            TurnEnded(turn_id="t1", stop_reason="cancelled"),
        )
    )
    assert s.status == "idle"
    assert "r1" in s.resolved_permissions


def test_closed_and_sandbox_state_are_folded():
    s = fold(
        _events(
            SessionCreated(device_id="d"), SandboxState(state="paused"), SessionClosed()
        )
    )
    assert (s.status, s.sandbox) == ("closed", "paused")
