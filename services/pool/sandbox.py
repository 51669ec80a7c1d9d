"""The worker's way to its session's sandbox: broker bind, envd client, activity.

The worker never names its session to the broker: it presents its id and the
one-time token the pool gave it over a private pipe; the broker answers from the
pool's assignment record. The grant names the envd URL and a scoped access
token; each bind returns the token for the next. A binding goes stale at each
turn start (the sandbox may have been paused or rebuilt in between), before its
token expires, and after an envd auth or availability error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import msgspec
from nats.aio.client import Client

from schemas.broker import BindGrant, SaveReply, SaveRequest
from schemas.names import BusNames
from services.broker.client import bind, report_activity
from services.broker.errors import BindRefusedError
from services.common.request import NoAnswerError, ask
from services.common.tasks import cancel_and_wait
from services.envd import EnvdClient, SandboxTools
from services.pool.cancellation import cancel_requested
from services.pool.errors import SandboxUnavailableError

log = logging.getLogger(__name__)

REBUILT_NOTICE = (
    "Note: the remote computer was rebuilt; earlier processes and terminals "
    "are gone (files were restored from the latest archive)."
)
_save_reply = msgspec.json.Decoder(SaveReply)
# Rebind this long before the access token expires.
EXPIRY_MARGIN_S = 30.0


class SandboxBinding:
    """Lazily bound tools for one session; one per worker assignment."""

    def __init__(
        self,
        nc: Client,
        names: BusNames,
        *,
        worker_id: str,
        session_id: str,
        token: str,
        activity_interval_s: float = 5.0,
        bind_timeout_s: float = 60.0,
        bind_retry_s: float = 10.0,
    ) -> None:
        self._nc = nc
        self._names = names
        self.worker_id = worker_id
        self.session_id = session_id
        self._token = token
        self._activity_interval_s = activity_interval_s
        self._reported: dict[str, float] = {}  # kind → when last reported
        self._bind_timeout_s = bind_timeout_s
        self._bind_retry_s = bind_retry_s
        self.activity_failures = 0
        self._grant: BindGrant | None = None
        self._client: EnvdClient | None = None
        self._tools: SandboxTools | None = None
        self._stale = True
        self._notice: str | None = None

    def mark_stale(self) -> None:
        """Bind again before the next tool call."""
        self._stale = True

    def take_notice(self) -> str | None:
        """A message for the model about the sandbox (once), e.g. it was rebuilt."""
        notice, self._notice = self._notice, None
        return notice

    async def tools(self) -> SandboxTools:
        """Tools on the session's sandbox, binding first when needed."""
        grant = self._grant
        expiring = (
            grant is not None and grant.expires_at - time.time() < EXPIRY_MARGIN_S
        )
        if self._tools is None or self._stale or expiring:
            await self._bind()
        assert self._tools is not None
        return self._tools

    async def _bind(self) -> None:
        try:
            grant = await bind(
                self._nc,
                self._names,
                self.worker_id,
                self._token,
                timeout=self._bind_timeout_s,
                retry_s=self._bind_retry_s,
            )
        except BindRefusedError as exc:
            raise SandboxUnavailableError(exc.code, exc.message) from exc
        self._token = grant.next_token
        if grant.rebuilt:
            self._notice = grant.notice or REBUILT_NOTICE
        same = self._grant is not None and self._grant.sandbox_id == grant.sandbox_id
        if self._tools is not None and same and not grant.rebuilt:
            # Same sandbox, fresh token: keep the version guard and path cache.
            assert self._client is not None
            await self._client.close()
            self._tools.client = self._client = self._new_client(grant)
        else:
            await self.close()
            self._client = self._new_client(grant)
            self._tools = SandboxTools(self._client)
        self._grant = grant
        self._stale = False

    @staticmethod
    def _new_client(grant: BindGrant) -> EnvdClient:
        return EnvdClient(grant.envd_url, grant.sandbox_id, grant.access_token)

    @contextlib.asynccontextmanager
    async def activity(self, kind: str) -> AsyncIterator[None]:
        """Report ``kind`` activity now and every few seconds while inside.

        This is what keeps a sandbox awake while a tool runs (T2 counts from
        the last report), so a failed report is logged, counted and retried
        within a second instead of waiting a whole interval.
        """
        task = asyncio.create_task(self._beat(kind))
        try:
            yield
        finally:
            await cancel_and_wait(task)

    async def _beat(self, kind: str) -> None:
        while not cancel_requested():
            gap = self._activity_interval_s / 10
            if time.monotonic() - self._reported.get(kind, -gap) < gap:
                # Reported a moment ago (the step before): the broker would
                # read its record only to find nothing to write (it debounces).
                await asyncio.sleep(self._activity_interval_s)
                continue
            try:
                await report_activity(
                    self._nc,
                    self._names,
                    self.session_id,
                    kind,
                    self.worker_id,
                    # A running tool holds the sandbox awake until a few
                    # missed reports later, whatever T2 is.
                    hold_s=3 * self._activity_interval_s if kind == "tool" else 0.0,
                )
            except Exception as exc:
                self.activity_failures += 1
                log.warning(
                    "%s activity of %s not reported (%d failures): %s",
                    kind,
                    self.session_id,
                    self.activity_failures,
                    exc,
                )
                await asyncio.sleep(min(1.0, self._activity_interval_s))
                continue
            self._reported[kind] = time.monotonic()
            await asyncio.sleep(self._activity_interval_s)

    async def save_turn(self, turn_id: str) -> None:
        """Have the broker save the workspace as of this turn's end.

        Called just before ``turn.ended`` is appended, so the save cannot hold
        the next turn's changes (``services/broker/turnsave.py``). Not asked
        when this worker never reached the sandbox (nothing of it to save).
        A failure is logged: the broker then saves when it sees the turn end.
        """
        if self._grant is None:
            return
        req = SaveRequest(
            worker_id=self.worker_id, session_id=self.session_id, turn_id=turn_id
        )
        try:
            msg = await ask(
                self._nc,
                self._names.broker_save,
                msgspec.json.encode(req),
                total_s=self._bind_timeout_s,
                retry_s=self._bind_retry_s,
            )
            reply = _save_reply.decode(msg.data)
        except (NoAnswerError, msgspec.DecodeError) as exc:
            log.warning("turn-end save of %s not taken: %s", self.session_id, exc)
            return
        if not reply.ok:
            log.warning("turn-end save of %s: %s", self.session_id, reply.error)

    async def close(self) -> None:
        """Close the envd client (commands it started keep running)."""
        if self._client is not None:
            await self._client.close()
        self._client = None
        self._tools = None
