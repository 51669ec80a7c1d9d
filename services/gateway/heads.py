"""Which cached summaries are still current: one request for a whole page.

A listing page shows up to 200 sessions; checking each head separately is two
exact gets per session (event ``last`` is there, event ``last+1`` is not). A
batched direct get with ``multi_last`` (nats-server 2.11+) asks for both
subjects of every session at once and answers with the messages that exist.
Anything unexpected (an old server, a truncated answer) confirms nothing, and
the caller checks those sessions one by one as before.
"""

from __future__ import annotations

import json
import logging

import nats.errors
from nats.aio.client import Client
from nats.js.errors import APIError

from eventstore.deadletter import subject_seq
from eventstore.directget import API, subject
from schemas.names import BusNames

log = logging.getLogger(__name__)


async def current(
    nc: Client, names: BusNames, last: dict[str, int], wait_s: float
) -> set[str]:
    """The sessions whose event ``last[sid]`` exists and ``last[sid] + 1`` not."""
    wanted = {sid: seq for sid, seq in last.items() if seq > 0}
    if not wanted:
        return set()
    filters = [
        names.log_seq(sid, s) for sid, seq in wanted.items() for s in (seq, seq + 1)
    ]
    batch = 2 * len(filters)  # room for a dead letter beside an event
    try:
        stored = await _multi_last(nc, names.log_stream, filters, batch, wait_s)
    except (APIError, nats.errors.Error, TimeoutError) as exc:
        log.debug("batched head check failed, checking one by one: %s", exc)
        return set()
    if stored is None:
        return set()
    present: set[tuple[str, int]] = set()
    for subj in stored:
        seq = subject_seq(names, subj)
        if seq is not None:
            present.add((names.session_of_subject(subj), seq))
    return {
        sid
        for sid, seq in wanted.items()
        if (sid, seq) in present and (sid, seq + 1) not in present
    }


async def _multi_last(
    nc: Client, stream: str, filters: list[str], batch: int, wait_s: float
) -> list[str] | None:
    """Subjects of the last message of each filter; None if the answer was cut."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        request = {"multi_last": filters, "batch": batch}
        await nc.publish(
            f"{API}.DIRECT.GET.{stream}", json.dumps(request).encode(), reply=inbox
        )
        out: list[str] = []
        while len(out) < batch:
            msg = await sub.next_msg(timeout=wait_s)
            status = (msg.headers or {}).get("Status")
            if status in {"204", "404"}:
                return out
            if status:
                return None
            out.append(subject(msg))
        return None
    finally:
        await sub.unsubscribe()
