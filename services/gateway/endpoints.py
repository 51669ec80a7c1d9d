"""HTTP handlers of the App API: decode at the edge, call the commands, encode."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

import msgspec
import nats.errors
from aiohttp import web
from nats.aio.client import Client

from schemas.api import (
    AnswerPermission,
    Appended,
    CreateSession,
    ForkSession,
    Health,
    SendPrompt,
    SessionList,
)
from services.gateway.bodies import cursor_of, decode_body, follow_of
from services.gateway.caps import DeviceCaps
from services.gateway.commands import NotPending, SessionCommands
from services.gateway.contract import openapi
from services.gateway.errors import TooLargeError, UnavailableError
from services.gateway.forks import Forker
from services.gateway.listing import list_page, paged
from services.gateway.metrics import CONTENT_TYPE_LATEST, GatewayMetrics
from services.gateway.stream import EventStream
from services.gateway.tickets import TICKETS
from services.gateway.usage import UsageReader, window_of
from services.gateway.webhooks import WebhookRoutes

if TYPE_CHECKING:
    from eventstore.pages import SessionPages

T = TypeVar("T")
MAX_REQUEST_ID = 128


def json_response(body: object, status: int = 200) -> web.Response:
    """A JSON answer encoded by msgspec."""
    return web.Response(
        body=msgspec.json.encode(body), status=status, content_type="application/json"
    )


def device_of(request: web.Request) -> str:
    """The authenticated device (set by the auth middleware)."""
    device: str = request["device"]
    return device


async def committed(work: Awaitable[T]) -> T:
    """Finish an append even if the client hangs up (handlers are cancellable)."""
    return await asyncio.shield(work)


class Endpoints:
    """One method per route name in ``contract.ROUTES``."""

    def __init__(
        self,
        nc: Client,
        commands: SessionCommands,
        stream: EventStream,
        metrics: GatewayMetrics,
        max_prompt_bytes: int,
        caps: DeviceCaps,
        webhooks: WebhookRoutes,
        usage: UsageReader | None = None,
        pages: SessionPages | None = None,
    ) -> None:
        self._nc = nc
        self._caps = caps
        self._webhooks = webhooks
        self._pages = pages
        self._commands = commands
        self._stream = stream
        self._metrics = metrics
        self._max_prompt = max_prompt_bytes
        self._usage = usage
        self._openapi = msgspec.json.encode(openapi())

    async def create_session(self, request: web.Request) -> web.Response:
        """POST /v1/sessions."""
        body = await decode_body(request, CreateSession)
        await self._caps.check_new_session(device_of(request))
        session = await committed(
            self._commands.create(device_of(request), body.title, body.metadata)
        )
        return json_response(session, 201)

    async def list_sessions(self, request: web.Request) -> web.Response:
        """GET /v1/sessions (paged when ``limit`` or ``cursor`` is given)."""
        if self._pages is not None and paged(request):
            page = await list_page(
                request, device_of(request), self._pages, self._commands
            )
            return json_response(page)
        sessions = await self._commands.list(device_of(request))
        return json_response(SessionList(sessions=sessions))

    async def get_session(self, request: web.Request) -> web.Response:
        """GET /v1/sessions/{sid}."""
        record = await self._commands.owned(
            request.match_info["sid"], device_of(request)
        )
        return json_response(await self._commands.view(record))

    async def delete_session(self, request: web.Request) -> web.Response:
        """DELETE /v1/sessions/{sid}."""
        record = await self._commands.owned(
            request.match_info["sid"], device_of(request)
        )
        return json_response(await committed(self._commands.close(record)), 202)

    async def fork_session(self, request: web.Request) -> web.Response:
        """POST /v1/sessions/{sid}/fork."""
        record = await self._commands.owned(
            request.match_info["sid"], device_of(request)
        )
        body = await decode_body(request, ForkSession)
        forker = Forker(self._nc, self._commands)
        return json_response(await committed(forker.fork(record, body)), 201)

    async def prompt(self, request: web.Request) -> web.Response:
        """POST /v1/sessions/{sid}/prompt."""
        record = await self._commands.owned(
            request.match_info["sid"], device_of(request)
        )
        body = await decode_body(request, SendPrompt)
        if len(body.text.encode()) > self._max_prompt:
            raise TooLargeError(
                f"prompt text is over {self._max_prompt} bytes", "$.text"
            )
        await self._caps.check_sandbox_for(record)
        answer = await committed(
            self._commands.prompt(record, body.text, body.client_msg_id)
        )
        return json_response(answer, 202)

    async def cancel(self, request: web.Request) -> web.Response:
        """POST /v1/sessions/{sid}/cancel."""
        record = await self._commands.owned(
            request.match_info["sid"], device_of(request)
        )
        seq = await committed(self._commands.cancel(record))
        return json_response(Appended(seq=seq), 202)

    async def answer_permission(self, request: web.Request) -> web.Response:
        """POST /v1/sessions/{sid}/permissions/{request_id}."""
        record = await self._commands.owned(
            request.match_info["sid"], device_of(request)
        )
        request_id = request.match_info["request_id"]
        body = await decode_body(request, AnswerPermission)
        if len(request_id) > MAX_REQUEST_ID:
            raise NotPending()
        seq = await committed(self._commands.answer(record, request_id, body.option))
        return json_response(Appended(seq=seq))

    async def events(self, request: web.Request) -> web.StreamResponse:
        """GET /v1/sessions/{sid}/events (SSE)."""
        record = await self._commands.owned(
            request.match_info["sid"], device_of(request)
        )
        cursor, follow = cursor_of(request), follow_of(request)
        async with self._caps.stream(record.device_id):
            return await self._stream.serve(request, record.session_id, cursor, follow)

    async def put_webhook(self, request: web.Request) -> web.Response:
        """PUT /v1/webhooks."""
        return json_response(await self._webhooks.put(request, device_of(request)))

    async def get_webhook(self, request: web.Request) -> web.Response:
        """GET /v1/webhooks."""
        return json_response(await self._webhooks.get(device_of(request)))

    async def delete_webhook(self, request: web.Request) -> web.Response:
        """DELETE /v1/webhooks."""
        await self._webhooks.delete(device_of(request))
        return web.Response(status=204)

    async def stream_ticket(self, request: web.Request) -> web.Response:
        """POST /v1/sessions/{sid}/stream-ticket: a one-use ``?ticket=`` for events."""
        device = device_of(request)
        record = await self._commands.owned(request.match_info["sid"], device)
        ticket = request.app[TICKETS].codec.issue(record.session_id, device)
        return json_response(ticket, 201)

    async def session_usage(self, request: web.Request) -> web.Response:
        """GET /v1/sessions/{sid}/usage."""
        record = await self._commands.owned(
            request.match_info["sid"], device_of(request)
        )
        return json_response(await self._reader().session(record.session_id))

    async def usage(self, request: web.Request) -> web.Response:
        """GET /v1/usage?from=&to=."""
        reader = self._reader()
        start, end = window_of(request, reader.now())
        return json_response(await reader.device(device_of(request), start, end))

    def _reader(self) -> UsageReader:
        if self._usage is None:
            raise web.HTTPNotFound()
        return self._usage

    async def healthz(self, request: web.Request) -> web.Response:
        """GET /healthz: 200 only when NATS is connected and JetStream answers."""
        if not self._nc.is_connected:
            raise UnavailableError()
        try:
            await self._nc.jetstream(timeout=1.0).account_info()
        except (nats.errors.Error, TimeoutError) as exc:
            raise UnavailableError() from exc
        return json_response(Health())

    async def metrics(self, request: web.Request) -> web.Response:
        """GET /metrics (Prometheus text)."""
        resp = web.Response(body=self._metrics.render())
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def openapi(self, request: web.Request) -> web.Response:
        """GET /v1/openapi.json."""
        return web.Response(body=self._openapi, content_type="application/json")
