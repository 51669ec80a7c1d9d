"""Audit one session log: verify continuity and the hash chain, fold, transcribe.

``verify`` is pure (stored events in, report out) so the live log and the SQLite
copy are audited by the same rules: seqs 1..n contiguous, each envelope's
``session_id``/``seq`` match where it is stored, ``prev`` of seq 1 is null and
``prev`` of event n is the digest of the exact bytes of event n-1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from eventstore.chain import digest
from eventstore.deadletter import LogDeadLetter
from eventstore.fold import SessionSummary, evolve
from eventstore.log import StoredEvent
from schemas.codec import EventDecodeError
from schemas.events import (
    AgentMessage,
    AgentMessageDelta,
    AgentThoughtDelta,
    ErrorRaised,
    Event,
    PermissionRequested,
    PermissionResolved,
    PolicyUpdated,
    SandboxState,
    SessionClosed,
    SessionCreated,
    ToolCall,
    ToolResult,
    ToolUpdate,
    TurnCancelRequested,
    TurnEnded,
    TurnStarted,
    UserPrompt,
    WorkerAssigned,
    WorkerReleased,
)

# Streaming noise: the final ``agent.message`` carries the full text.
QUIET_TYPES = frozenset(
    {AgentMessageDelta.TYPE, AgentThoughtDelta.TYPE, ToolUpdate.TYPE}
)
_CLIP = 240


class Break(msgspec.Struct, frozen=True):
    """Where a log stops verifying, and why."""

    seq: int
    problem: str


class Line(msgspec.Struct, frozen=True):
    """One transcript entry."""

    seq: int
    ts: str
    type: str
    actor: str
    text: str


class AuditReport(msgspec.Struct, frozen=True, kw_only=True):
    """The verdict on one session log."""

    session_id: str
    events: int
    last_seq: int
    first_break: Break | None
    problems: list[Break]
    summary: SessionSummary
    transcript: list[Line]

    @property
    def ok(self) -> bool:
        """True when the log is complete and its chain verifies."""
        return self.first_break is None


class _Checker:
    """Walks the events in order, noting each problem and folding what decodes."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.problems: list[Break] = []
        self.summary = SessionSummary()
        self.transcript: list[Line] = []
        self.expected = 1
        self.prev_raw: bytes | None = None
        self.count = 0

    def check(self, stored: StoredEvent) -> None:
        self.count += 1
        if stored.seq != self.expected:
            self._note_gap(stored.seq)
        try:
            event = stored.event()
        except EventDecodeError as exc:
            self._note(stored.seq, f"undecodable event: {exc}")
        else:
            self._check_envelope(stored, event)
            self.summary = evolve(self.summary, event)
            if event.type not in QUIET_TYPES:
                self.transcript.append(_line(event))
        self.expected = stored.seq + 1
        self.prev_raw = stored.raw

    def _note_gap(self, seq: int) -> None:
        if seq > self.expected:
            missing = f"seq {self.expected}" + (
                f"..{seq - 1}" if seq - 1 > self.expected else ""
            )
            self._note(self.expected, f"missing {missing} (next stored is {seq})")
        else:
            self._note(seq, f"seq {seq} stored again after seq {self.expected - 1}")
        self.prev_raw = None  # the chain restarts after a gap; don't double-report

    def _check_envelope(self, stored: StoredEvent, event: Event) -> None:
        if event.session_id != self.session_id:
            self._note(stored.seq, f"envelope session_id is {event.session_id!r}")
        if event.seq != stored.seq:
            self._note(
                stored.seq, f"envelope seq {event.seq} stored at seq {stored.seq}"
            )
        if stored.seq == 1 and event.prev is not None:
            self._note(1, "prev of seq 1 is not null")
        elif self.prev_raw is not None and event.prev != digest(self.prev_raw):
            self._note(
                stored.seq,
                f"prev does not match the digest of seq {stored.seq - 1} "
                "(it was altered, removed or reordered)",
            )

    def _note(self, seq: int, problem: str) -> None:
        self.problems.append(Break(seq, problem))


def verify(
    session_id: str,
    events: Iterable[StoredEvent],
    head: int | None = None,
    dead: Iterable[LogDeadLetter] = (),
) -> AuditReport:
    """Audit ``events`` (stored, in order); ``head``: where the log claims to end.

    ``dead``: messages on the session's subjects that were not events (each is
    a problem, named by its stream position).
    """
    checker = _Checker(session_id)
    for letter in dead:
        checker.problems.append(
            Break(
                letter.seq or 0,
                f"dead letter at stream seq {letter.stream_seq} "
                f"({letter.subject}): {letter.reason}",
            )
        )
    for stored in events:
        checker.check(stored)
    last = checker.expected - 1
    if checker.count == 0:
        checker.problems.append(Break(1, "no events: no such session"))
    elif head is not None and head > last:
        checker.problems.append(
            Break(last + 1, f"missing seq {last + 1}..{head} (the log ends at {head})")
        )
    checker.problems.sort(key=lambda b: b.seq)
    return AuditReport(
        session_id=session_id,
        events=checker.count,
        last_seq=max(last, head or 0),
        first_break=checker.problems[0] if checker.problems else None,
        problems=checker.problems,
        summary=checker.summary,
        transcript=checker.transcript,
    )


def _clip(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _CLIP else flat[: _CLIP - 1] + "…"


def _args(args: dict[str, Any]) -> str:
    return _clip(json.dumps(args, ensure_ascii=False, sort_keys=True))


def _result(d: ToolResult) -> str:
    verdict = "ok" if d.ok else f"failed: {d.error or ''}".rstrip(": ")
    code = "" if d.exit_code is None else f" exit={d.exit_code}"
    cut = " (truncated)" if d.truncated else ""
    return f"tool result {d.call_id}: {verdict}{code}{cut} {_clip(d.output)}".rstrip()


def _sandbox(d: SandboxState) -> str:
    extra = ", ".join(
        part
        for part in (
            d.reason,
            d.provider,
            d.sandbox_id or "",
            "rebuilt" if d.rebuilt else "",
        )
        if part
    )
    return f"sandbox {d.state}" + (f" ({extra})" if extra else "")


_TEXT: dict[type[Any], Callable[[Any], str]] = {
    SessionCreated: lambda d: f"session created by device {d.device_id}: {d.title}",
    SessionClosed: lambda d: f"session closed ({d.reason})",
    UserPrompt: lambda d: f"user [{d.turn_id}]: {_clip(d.text)}",
    TurnStarted: lambda d: f"turn {d.turn_id} started (prompt at seq {d.prompt_seq})",
    TurnCancelRequested: lambda d: f"cancel requested for turn {d.turn_id}",
    TurnEnded: lambda d: f"turn {d.turn_id} ended: {d.stop_reason}",
    AgentMessage: lambda d: f"agent [{d.turn_id}]: {_clip(d.text)}",
    ToolCall: lambda d: f"tool call {d.call_id}: {d.tool} {_args(d.args)}",
    ToolResult: _result,
    PermissionRequested: lambda d: (
        f"permission requested {d.request_id}: {d.tool} {_args(d.args)}"
    ),
    PermissionResolved: lambda d: f"permission {d.request_id} answered: {d.option}",
    PolicyUpdated: lambda d: f"policy: {d.decision} {d.tool} for this {d.scope}",
    WorkerAssigned: lambda d: f"worker {d.worker_id} assigned ({d.host} pid {d.pid})",
    WorkerReleased: lambda d: f"worker {d.worker_id} released ({d.reason})",
    SandboxState: _sandbox,
    ErrorRaised: lambda d: f"error {d.code}: {_clip(d.message)}",
}


def _line(event: Event) -> Line:
    render = _TEXT.get(type(event.data))
    text = render(event.data) if render else f"{event.type} (not known to this build)"
    return Line(event.seq, event.ts, event.type, event.actor, text)


def render_text(report: AuditReport) -> str:
    """The human form: transcript, summary, verdict naming the first break."""
    out = [f"session {report.session_id}: {report.events} events"]
    out += [
        f"#{ln.seq:<5} {ln.ts}  {ln.actor:<24} {ln.text}" for ln in report.transcript
    ]
    s = report.summary
    out.append(
        f"status {s.status}; owner {s.device_id or '?'}; sandbox {s.sandbox}; "
        f"last seq {report.last_seq}"
    )
    if report.first_break is None:
        out.append("OK: seqs contiguous, hash chain verifies")
    else:
        brk = report.first_break
        out.append(f"BROKEN at seq {brk.seq}: {brk.problem}")
        out += [f"  also at seq {p.seq}: {p.problem}" for p in report.problems[1:20]]
    return "\n".join(out)


def render_json(report: AuditReport) -> bytes:
    """The machine form (``--json``)."""
    body = msgspec.structs.asdict(report)
    body["ok"] = report.ok
    body["summary"] = {
        "device_id": report.summary.device_id,
        "title": report.summary.title,
        "created_at": report.summary.created_at,
        "status": report.summary.status,
        "sandbox": report.summary.sandbox,
        "last_seq": report.summary.last_seq,
    }
    return msgspec.json.encode(body)
