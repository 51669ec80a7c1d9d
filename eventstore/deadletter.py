"""Dead letters of the session log: messages on a log subject that are not our events.

Anyone allowed to publish into the log (any service login) can put a message
there without our headers, with a body that is not an envelope, or on a subject
that disagrees with both. Readers never fail on one: ``check`` tells a stored
event from a dead letter, the caller skips the latter, and it is counted and
logged with its subject and stream position (``agentbus audit`` names them).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

import msgspec

from schemas.names import BusNames

log = logging.getLogger(__name__)

SEQ_HEADER = "Agentbus-Seq"
TYPE_HEADER = "Agentbus-Type"
# How many recent dead letters a process remembers (for audit and inspection).
_KEEP = 256


class _Head(msgspec.Struct, frozen=True):
    session_id: str
    seq: int
    type: str


_HEAD = msgspec.json.Decoder(_Head)


@dataclass(frozen=True, slots=True)
class LogDeadLetter:
    """One skipped message: where it is, the seq its subject claims (if any), why."""

    stream_seq: int
    subject: str
    seq: int | None
    reason: str


class DeadLetters:
    """Count and remember the dead letters a reader skipped (one per process)."""

    def __init__(self) -> None:
        self.count = 0
        self.recent: deque[LogDeadLetter] = deque(maxlen=_KEEP)

    def note(self, letter: LogDeadLetter) -> None:
        """Count, remember and log one dead letter."""
        self.count += 1
        self.recent.append(letter)
        log.warning(
            "dead letter skipped: stream seq %d subject %s: %s",
            letter.stream_seq,
            letter.subject,
            letter.reason,
        )

    def of_session(self, names: BusNames, session_id: str) -> list[LogDeadLetter]:
        """The remembered dead letters on one session's subjects, in stream order."""
        prefix = names.log_session(session_id)[:-1]
        found = {d.stream_seq: d for d in self.recent if d.subject.startswith(prefix)}
        return [found[k] for k in sorted(found)]


DEAD_LETTERS = DeadLetters()


def subject_seq(names: BusNames, subject: str) -> int | None:
    """The per-session seq a log subject claims (``<prefix>.log.<s>.<seq>.…``)."""
    tokens = subject.split(".")
    at = 3 + names.prefix.count(".")
    if len(tokens) <= at + 1 or not tokens[at].isdigit():
        return None
    return int(tokens[at])


def problem(
    names: BusNames, subject: str, data: bytes | None, headers: dict[str, str] | None
) -> str:
    """Why a log message is not one of our events ("" when it is)."""
    hdrs = headers or {}
    seq_text, kind = hdrs.get(SEQ_HEADER), hdrs.get(TYPE_HEADER)
    if seq_text is None or kind is None:
        return f"no {SEQ_HEADER}/{TYPE_HEADER} header"
    if not seq_text.isdigit():
        return f"header {SEQ_HEADER}={seq_text[:40]!r} is not a seq"
    try:
        head = _HEAD.decode(data or b"")
    except msgspec.DecodeError as exc:
        return f"not an event envelope: {exc}"
    expected = names.log_subject(head.session_id, head.seq, head.type)
    if subject != expected or int(seq_text) != head.seq or kind != head.type:
        return f"subject/headers disagree with the envelope ({expected})"
    return ""
