"""The bind protocol: worker id + one-time token → the session's sandbox and a token."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from schemas.broker import Assignment, BindGrant, BindRefused, BindReply, BindRequest
from services.broker import machine_io as m
from services.broker.errors import SandboxError
from services.broker.lifecycle import REBUILT_NOTICE, Lifecycle, SessionDeletedError
from services.broker.records import SandboxRecord

log = logging.getLogger(__name__)

_request = msgspec.json.Decoder(BindRequest)
_assignment = msgspec.json.Decoder(Assignment)


def token_hash(token: str) -> str:
    """Hex SHA-256 of a one-time token (what the assignment record stores)."""
    return hashlib.sha256(token.encode()).hexdigest()


def refuse(code: str, message: str) -> bytes:
    """An encoded refusal."""
    return msgspec.json.encode(
        BindReply(refused=BindRefused(code=code, message=message))
    )


def next_token_for(req: BindRequest) -> str:
    """The token a bind hands out: derived from the request when it has an id.

    HMAC(token, request id) is unguessable without the presented token, and
    the same for every retry of one request, so a retried bind can be answered
    again by any replica without storing the token itself.
    """
    if not req.request_id:
        return secrets.token_urlsafe(32)
    mac = hmac.new(req.token.encode(), b"next:" + req.request_id.encode(), "sha256")
    return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")


def _is_current(req: BindRequest, assignment: Assignment) -> bool:
    return hmac.compare_digest(token_hash(req.token), assignment.token_sha256)


def _is_replay(req: BindRequest, assignment: Assignment) -> bool:
    """A retry of the request that consumed the previous token."""
    if not req.request_id or req.request_id != assignment.last_request_id:
        return False
    if not hmac.compare_digest(token_hash(req.token), assignment.prev_token_sha256):
        return False
    expected = token_hash(next_token_for(req))
    return hmac.compare_digest(expected, assignment.token_sha256)


class Binder:
    """Answers bind requests from the pool's assignment records."""

    def __init__(
        self, life: Lifecycle, assignments: KeyValue, token_ttl_s: float
    ) -> None:
        self.life = life
        self.assignments = assignments
        self.token_ttl_s = token_ttl_s

    async def handle(self, data: bytes) -> bytes:
        """One bind request → an encoded :class:`BindReply`."""
        try:
            req = _request.decode(data)
        except msgspec.DecodeError as exc:
            return refuse("bad_request", str(exc))
        try:
            entry = await self.assignments.get(req.worker_id)
        except KeyNotFoundError:
            return refuse("not_assigned", "this worker has no assignment")
        if entry.value is None:
            return refuse("not_assigned", "this worker has no assignment")
        assignment = _assignment.decode(entry.value)
        if assignment.state != "assigned":
            return refuse("assignment_ended", "this worker's assignment has ended")
        replay = _is_replay(req, assignment)
        if not replay and not _is_current(req, assignment):
            return refuse("token_reused", "the one-time token is not current")
        revision = 0 if replay else int(entry.revision or 0)
        return await self._grant(req, assignment, revision)

    async def _grant(
        self, req: BindRequest, assignment: Assignment, revision: int
    ) -> bytes:
        sid = assignment.session_id
        try:
            rec = await self.life.checked(sid, f"bind by {assignment.worker_id}")
        except SessionDeletedError as exc:
            return refuse("session_deleted", str(exc))
        except SandboxError as exc:
            log.warning("bind for %s failed: %s", sid, exc)
            return refuse("sandbox_failed", str(exc))
        await self.life.touch(sid)
        next_token = next_token_for(req)
        if revision and not await self._consume(req, assignment, next_token, revision):
            return refuse("token_reused", "the one-time token was already used")
        rebuilt = rec.notice_pending
        if rebuilt:
            await self._clear_notice(sid, rec)
        grant = BindGrant(
            session_id=sid,
            sandbox_id=rec.sandbox_id or "",
            envd_url=rec.envd_url,
            access_token=rec.access_token,
            expires_at=self._expiry(rec),
            next_token=next_token,
            rebuilt=rebuilt,
            notice=REBUILT_NOTICE if rebuilt else None,
        )
        return msgspec.json.encode(BindReply(grant=grant))

    async def _consume(
        self, req: BindRequest, assignment: Assignment, next_token: str, revision: int
    ) -> bool:
        """Replace the token by ``next_token``; True if this request did (or a
        retry of it already had)."""
        consumed = msgspec.structs.replace(
            assignment,
            token_sha256=token_hash(next_token),
            prev_token_sha256=token_hash(req.token),
            last_request_id=req.request_id,
        )
        try:
            await self.assignments.update(
                assignment.worker_id, msgspec.json.encode(consumed), last=revision
            )
        except KeyWrongLastSequenceError:
            # A concurrent bind with the same token won: a retry of this very
            # request (then it is ours too), or a reuse.
            entry = await self.assignments.get(assignment.worker_id)
            now = _assignment.decode(entry.value or b"{}")
            return _is_replay(req, now)
        return True

    def _expiry(self, rec: SandboxRecord) -> float:
        expiry = self.life.now() + self.token_ttl_s
        if rec.token_expires_at:
            expiry = min(expiry, rec.token_expires_at)
        return expiry

    async def _clear_notice(self, sid: str, rec: SandboxRecord) -> None:
        await self.life.apply(sid, m.NoticeShown(sandbox_id=rec.sandbox_id or ""))
