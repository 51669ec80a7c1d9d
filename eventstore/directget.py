"""Batched direct get (nats-server 2.11+): up to N messages of a subject, one request.

``$JS.API.DIRECT.GET.<stream>`` with ``{"seq", "next_by_subj", "batch"}`` answers
with at most ``batch`` messages, then an end-of-batch status (204). Unlike an
ordered push consumer, it never sends more than asked for, so a bounded read
costs what it returns. nats.py 2.16 has no call for it; this is the request.
"""

from __future__ import annotations

import json

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import APIError

API = "$JS.API"
_END = {"204", "404", "408"}  # end of batch, nothing (more) there, expired


async def direct_batch(
    nc: Client, stream: str, subject: str, start: int, batch: int, wait_s: float
) -> list[Msg]:
    """Messages of ``subject`` from stream seq ``start`` on, at most ``batch``."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        request = {"seq": start, "next_by_subj": subject, "batch": batch}
        await nc.publish(
            f"{API}.DIRECT.GET.{stream}", json.dumps(request).encode(), reply=inbox
        )
        out: list[Msg] = []
        while len(out) < batch:
            msg = await sub.next_msg(timeout=wait_s)
            hdrs = msg.headers or {}
            status = hdrs.get("Status")
            if status in _END:
                return out
            if status:
                code = int(status) if status.isdigit() else 0
                raise APIError(code=code, description=hdrs.get("Description", ""))
            out.append(msg)
        return out
    finally:
        await sub.unsubscribe()


def stream_seq(msg: Msg) -> int:
    """The stream seq a direct-get answer carries in its headers."""
    text = (msg.headers or {}).get("Nats-Sequence", "0")
    return int(text) if text.isdigit() else 0


def subject(msg: Msg) -> str:
    """The subject the message was stored on (the answer itself comes to an inbox)."""
    return (msg.headers or {}).get("Nats-Subject", "")
