"""What workers (and the pool) call: bind to the session's sandbox, report activity."""

from __future__ import annotations

import secrets

import msgspec
from nats.aio.client import Client

from schemas.broker import Activity, BindGrant, BindReply, BindRequest
from schemas.names import BusNames
from services.broker.errors import BindRefusedError
from services.common.request import NoAnswerError, ask

_reply_decoder = msgspec.json.Decoder(BindReply)


async def bind(
    nc: Client,
    names: BusNames,
    worker_id: str,
    token: str,
    timeout: float = 60.0,  # noqa: ASYNC109 - the total budget, retries included
    *,
    silence_s: float = 3.0,
    retry_s: float | None = None,
) -> BindGrant:
    """Ask the broker for this worker's sandbox; raises :class:`BindRefusedError`.

    The grant's ``next_token`` replaces ``token`` for the next bind (each bind
    consumes the token it presents). The request carries an id, so it is
    retried — by whichever replica answers — when the one working on it falls
    silent for ``silence_s`` (it died) or none is there, for up to ``retry_s``
    (default ``timeout``); an answer in progress may take ``timeout``.
    Codes: ``broker_unavailable`` (no replica subscribed) and ``broker_timeout``.
    """
    req = BindRequest(
        worker_id=worker_id, token=token, request_id=secrets.token_hex(12)
    )
    body = msgspec.json.encode(req)
    try:
        msg = await ask(
            nc,
            names.broker_bind,
            body,
            silence_s=silence_s,
            total_s=timeout,
            retry_s=retry_s,
        )
    except NoAnswerError as exc:
        if exc.reason == "no_responders":
            raise BindRefusedError("broker_unavailable", str(exc)) from exc
        raise BindRefusedError("broker_timeout", str(exc)) from exc
    try:
        reply = _reply_decoder.decode(msg.data)
    except msgspec.DecodeError as exc:
        raise BindRefusedError("bad_reply", f"undecodable reply: {exc}") from exc
    if reply.grant is not None:
        return reply.grant
    refused = reply.refused
    if refused is None:
        raise BindRefusedError("bad_reply", "broker answered neither grant nor refusal")
    raise BindRefusedError(refused.code, refused.message)


def activity_subject(names: BusNames) -> str:
    """Subject workers and the gateway publish activity on."""
    return names.broker_activity


async def report_activity(
    nc: Client,
    names: BusNames,
    session_id: str,
    kind: str,
    worker_id: str | None = None,
    hold_s: float = 0.0,
) -> None:
    """Tell brokers work is in flight for a session (resets its idle clock T2).

    ``kind`` is ``tool``, ``model`` or ``file``; heartbeats must not call this.
    ``hold_s`` (tools): no pause for that long, whatever T2 is. Fire-and-forget:
    a lost report only makes a pause come sooner.
    """
    if kind not in ("tool", "model", "file"):
        raise ValueError(f"activity kind {kind!r} is not tool, model or file")
    act = Activity(
        session_id=session_id,
        kind=kind,  # type: ignore[arg-type]
        worker_id=worker_id,
        hold_s=hold_s,
    )
    await nc.publish(activity_subject(names), msgspec.json.encode(act))
