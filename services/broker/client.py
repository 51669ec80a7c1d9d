"""What workers (and the pool) call: bind to the session's sandbox, report activity."""

from __future__ import annotations

import msgspec
import nats.errors
from nats.aio.client import Client

from schemas.broker import Activity, BindGrant, BindReply, BindRequest
from schemas.names import BusNames
from services.broker.errors import BindRefusedError

_reply_decoder = msgspec.json.Decoder(BindReply)


async def bind(
    nc: Client,
    names: BusNames,
    worker_id: str,
    token: str,
    timeout: float = 60.0,  # noqa: ASYNC109 - the request timeout, passed to NATS
) -> BindGrant:
    """Ask the broker for this worker's sandbox; raises :class:`BindRefusedError`.

    The grant's ``next_token`` replaces ``token`` for the next bind (each bind
    consumes the token it presents). ``timeout`` covers a cold create/rebuild.
    """
    body = msgspec.json.encode(BindRequest(worker_id=worker_id, token=token))
    try:
        msg = await nc.request(names.broker_bind, body, timeout=timeout)
    except nats.errors.NoRespondersError as exc:
        raise BindRefusedError("broker_unavailable", "no broker is running") from exc
    except TimeoutError as exc:
        raise BindRefusedError("broker_timeout", f"no answer in {timeout}s") from exc
    reply = _reply_decoder.decode(msg.data)
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
) -> None:
    """Tell brokers work is in flight for a session (resets its idle clock T2).

    ``kind`` is ``tool``, ``model`` or ``file``; heartbeats must not call this.
    Fire-and-forget: a lost report only makes a pause come sooner.
    """
    if kind not in ("tool", "model", "file"):
        raise ValueError(f"activity kind {kind!r} is not tool, model or file")
    act = Activity(session_id=session_id, kind=kind, worker_id=worker_id)  # type: ignore[arg-type]
    await nc.publish(activity_subject(names), msgspec.json.encode(act))
