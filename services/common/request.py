"""Request/reply that survives a replica dying mid-request.

A plain NATS request waits its whole timeout when the replica that took it
dies. Here the asker opts in with ``Agentbus-Want-Progress: 1``; the answerer
(:func:`answering`) sends an empty message with ``Agentbus-Progress: 1`` every
``PROGRESS_S`` while it works, then the answer. The asker gives up on one try
after ``silence_s`` without any message (the replica is gone) and asks again —
the queue group hands the retry to a live replica — until ``total_s`` has
passed. Requests
must therefore be idempotent (the broker's carry a request id).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from services.common.tasks import cancel_and_wait

PROGRESS_HEADER = "Agentbus-Progress"
WANT_PROGRESS_HEADER = "Agentbus-Want-Progress"
STATUS_HEADER = "Status"
PROGRESS_S = 0.5


class NoAnswerError(Exception):
    """Nobody answered within the request's total time (``reason`` says how)."""

    def __init__(self, subject: str, reason: str, tries: int) -> None:
        self.subject = subject
        self.reason = reason
        self.tries = tries
        super().__init__(f"{subject}: {reason} after {tries} tries")


class _Silent(Exception):
    """One try heard nothing for ``silence_s``."""


async def ask(
    nc: Client,
    subject: str,
    body: bytes,
    headers: dict[str, str] | None = None,
    *,
    silence_s: float = 3.0,
    total_s: float = 60.0,
    retry_s: float | None = None,
) -> Msg:
    """The answer to an idempotent request, retried across replicas.

    ``total_s`` bounds the whole request, a replica that keeps working on it
    included; ``retry_s`` (default: ``total_s``) bounds how long failed tries
    (nobody there, or a replica fell silent) are retried. Raises
    :class:`NoAnswerError` (``reason`` ``no_responders`` if none was even
    subscribed at the last try, else ``timeout``).
    """
    start = time.monotonic()
    deadline = start + total_s
    give_up = min(deadline, start + (total_s if retry_s is None else retry_s))
    delay, tries, reason = 0.05, 0, "timeout"
    hdrs = {**(headers or {}), WANT_PROGRESS_HEADER: "1"}
    while True:
        tries += 1
        try:
            return await _once(nc, subject, body, hdrs, silence_s, deadline)
        except nats.errors.NoRespondersError:
            reason = "no_responders"
        except _Silent:
            reason = "timeout"
        if time.monotonic() + delay >= give_up:
            raise NoAnswerError(subject, reason, tries)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


async def _once(
    nc: Client,
    subject: str,
    body: bytes,
    headers: dict[str, str],
    silence_s: float,
    deadline: float,
) -> Msg:
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(subject, body, reply=inbox, headers=headers)
        while True:
            wait = min(silence_s, deadline - time.monotonic())
            if wait <= 0:
                raise _Silent
            try:
                msg = await sub.next_msg(timeout=wait)
            except nats.errors.TimeoutError as exc:
                raise _Silent from exc
            hdrs = msg.headers or {}
            if hdrs.get(STATUS_HEADER) == "503" and not msg.data:
                raise nats.errors.NoRespondersError
            if not hdrs.get(PROGRESS_HEADER):
                return msg
    finally:
        with contextlib.suppress(nats.errors.ConnectionClosedError):
            await sub.unsubscribe()


@contextlib.asynccontextmanager
async def answering(nc: Client, msg: Msg) -> AsyncIterator[None]:
    """Send progress to an asker that wants it while the body of this runs."""
    if not msg.reply or not (msg.headers or {}).get(WANT_PROGRESS_HEADER):
        yield
        return
    task = asyncio.create_task(_beat(nc, msg.reply))
    try:
        yield
    finally:
        await cancel_and_wait(task)


async def _beat(nc: Client, reply: str) -> None:
    while True:
        await asyncio.sleep(PROGRESS_S)
        with contextlib.suppress(nats.errors.Error):
            await nc.publish(reply, b"", headers={PROGRESS_HEADER: "1"})
