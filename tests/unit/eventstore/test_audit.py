"""``verify``: the audit rules over stored events, with no bus."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.audit import render_json, render_text, verify
from eventstore.chain import digest
from eventstore.log import StoredEvent
from schemas.codec import encode_event
from schemas.events import (
    AgentMessage,
    AgentMessageDelta,
    Event,
    Payload,
    PermissionRequested,
    PermissionResolved,
    SandboxState,
    SessionCreated,
    ToolCall,
    ToolResult,
    UserPrompt,
)

PAYLOADS: list[Payload] = [
    SessionCreated(device_id="dev1", title="fix the build"),
    UserPrompt(text="run the tests", turn_id="t1"),
    SandboxState(state="running", provider="local"),
    ToolCall(turn_id="t1", call_id="c1", tool="bash", args={"cmd": "pytest"}),
    PermissionRequested(request_id="r1", turn_id="t1", call_id="c1", tool="bash"),
    PermissionResolved(request_id="r1", option="allow_once"),
    ToolResult(call_id="c1", ok=True, output="3 passed", exit_code=0),
    AgentMessageDelta(turn_id="t1", text="All"),
    AgentMessage(turn_id="t1", text="All 3 tests pass."),
]


def chain(
    session_id: str = "s1", payloads: list[Payload] = PAYLOADS
) -> list[StoredEvent]:
    """A well-formed log: seqs 1..n, each prev the digest of the one before."""
    out: list[StoredEvent] = []
    prev = None
    for seq, payload in enumerate(payloads, 1):
        raw = encode_event(
            Event(
                session_id=session_id,
                seq=seq,
                id=f"ev{seq}",
                type=payload.TYPE,
                ts="2026-11-29T10:00:00.000000Z",
                actor="gateway",
                data=payload,
                prev=prev,
            )
        )
        out.append(StoredEvent(seq, payload.TYPE, raw))
        prev = digest(raw)
    return out


def test_a_clean_log_verifies_and_folds() -> None:
    report = verify("s1", chain(), head=9)
    assert report.ok
    assert report.events == 9
    assert report.summary.device_id == "dev1"
    assert report.summary.sandbox == "running"


def test_transcript_shows_prompts_tools_approvals_and_sandbox_but_not_deltas() -> None:
    text = render_text(verify("s1", chain()))
    for needle in (
        "user [t1]: run the tests",
        "tool call c1: bash",
        "permission r1 answered: allow_once",
        "tool result c1: ok exit=0 3 passed",
        "sandbox running",
        "agent [t1]: All 3 tests pass.",
        "OK: seqs contiguous",
    ):
        assert needle in text
    assert "agent.message.delta" not in text


def test_a_removed_event_is_named_as_missing() -> None:
    events = chain()
    del events[3]
    report = verify("s1", events)
    assert report.first_break is not None
    assert report.first_break.seq == 4
    assert "missing seq 4" in report.first_break.problem


def test_a_removed_last_event_is_caught_by_the_head() -> None:
    report = verify("s1", chain()[:-1], head=9)
    assert report.first_break is not None
    assert report.first_break.seq == 9


def test_reordered_events_break_at_the_first_swapped_seq() -> None:
    events = chain()
    a, b = events[4], events[5]
    events[4], events[5] = StoredEvent(5, b.type, b.raw), StoredEvent(6, a.type, a.raw)
    report = verify("s1", events)
    assert report.first_break is not None
    assert report.first_break.seq == 5
    assert "envelope seq 6 stored at seq 5" in report.first_break.problem


def test_an_altered_event_breaks_the_chain_at_the_next_seq() -> None:
    events = chain()
    altered = events[2].raw.replace(b'"running"', b'"paused"')
    events[2] = StoredEvent(3, events[2].type, altered)
    report = verify("s1", events)
    assert report.first_break is not None
    assert report.first_break.seq == 4
    assert "digest of seq 3" in report.first_break.problem


def test_a_first_event_with_a_prev_is_a_break() -> None:
    events = chain()
    bad = events[0].raw.replace(b'"prev":null', b'"prev":"sha256:00"')
    report = verify("s1", [StoredEvent(1, events[0].type, bad), *events[1:]])
    assert report.first_break is not None
    assert report.first_break.seq == 1


def test_an_event_of_another_session_is_a_break() -> None:
    events = chain("s1")
    foreign = chain("s2")
    report = verify("s1", [*events[:2], foreign[2]])
    assert report.first_break is not None
    assert report.first_break.seq == 3
    assert "session_id" in report.first_break.problem


def test_undecodable_bytes_are_a_break_not_a_crash() -> None:
    events = chain()
    events[1] = StoredEvent(2, "user.prompt", b"{not json")
    report = verify("s1", events)
    assert report.first_break is not None
    assert report.first_break.seq == 2
    assert "undecodable" in report.first_break.problem


def test_an_empty_log_is_not_ok() -> None:
    report = verify("s_none", [])
    assert not report.ok


def test_json_report_says_ok_and_where_it_broke() -> None:
    events = chain()
    del events[1]
    body = msgspec.json.decode(render_json(verify("s1", events)))
    assert body["ok"] is False
    assert body["first_break"]["seq"] == 2
    assert body["summary"]["device_id"] == "dev1"


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["remove", "swap", "alter", "duplicate"]),
    data=st.data(),
)
def test_any_single_corruption_is_caught_at_or_before_the_next_seq(
    kind: str, data: st.DataObject
) -> None:
    events = chain()
    i = data.draw(st.integers(0, len(events) - 2), label="at")
    if kind == "remove":
        del events[i]
    elif kind == "swap":
        a, b = events[i], events[i + 1]
        events[i] = StoredEvent(a.seq, b.type, b.raw)
        events[i + 1] = StoredEvent(b.seq, a.type, a.raw)
    elif kind == "alter":
        raw = events[i].raw.replace(b'"actor":"gateway"', b'"actor":"mallory"')
        events[i] = StoredEvent(events[i].seq, events[i].type, raw)
    else:
        events.insert(i + 1, events[i])
    report = verify("s1", events, head=len(PAYLOADS))
    assert report.first_break is not None
    assert report.first_break.seq <= i + 2
