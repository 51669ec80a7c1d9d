"""The route table of the App API and the OpenAPI 3.1 document generated from it.

One table drives both the aiohttp router (``app.py``) and ``/v1/openapi.json``,
and every body schema comes from the msgspec Structs in ``schemas.api`` — the
document cannot drift from what the handlers decode and encode.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import msgspec

from schemas.api import (
    AnswerPermission,
    Appended,
    CreateSession,
    DeviceUsage,
    DirListing,
    ErrorBody,
    ForkSession,
    Health,
    PromptAccepted,
    Resync,
    SendPrompt,
    Session,
    SessionList,
    SessionUsage,
    StreamTicket,
)
from schemas.files import FileWritten
from schemas.webhooks import PutWebhook, Webhook, WebhookView

# file_get / file_put: mounted by files.py (broker room), documented here.
Kind = Literal["json", "sse", "text", "file_get", "file_put"]

ERROR_TEXT = {
    400: "Malformed JSON or header (files: path_outside_workspace)",
    401: "Missing or invalid device token",
    404: "No such session (also for another device's session); no webhook",
    409: "The session's state does not allow it",
    413: "Body or prompt text too large",
    422: "Invalid field (``field`` names it)",
    429: "Rate limited (``rate_limited``, ``Retry-After``) or a per-device cap "
    "(``too_many_sessions``, ``too_many_sandboxes``, ``too_many_streams``)",
    503: "NATS unavailable (``Retry-After``)",
}
AUTH_ERRORS = (401, 404, 429, 503)


class Route(NamedTuple):
    """One endpoint: how it is routed, what it takes and answers."""

    method: str
    path: str
    name: str
    summary: str
    body: type[msgspec.Struct] | None = None
    status: int = 200
    answer: type[msgspec.Struct] | None = None
    errors: tuple[int, ...] = AUTH_ERRORS
    auth: bool = True
    kind: Kind = "json"


ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/sessions", "create_session", "Open a session", CreateSession,
          201, Session, (400, 401, 413, 422, 429, 503)),
    Route("GET", "/v1/sessions", "list_sessions",
          "This device's sessions, newest first (paged with limit/cursor)",
          answer=SessionList, errors=(401, 422, 429, 503)),
    Route("GET", "/v1/sessions/{sid}", "get_session", "One session", answer=Session),
    Route("DELETE", "/v1/sessions/{sid}", "delete_session",
          "Close a session (idempotent); the log is kept", status=202, answer=Session),
    Route("POST", "/v1/sessions/{sid}/prompt", "prompt",
          "Append a prompt; the same client_msg_id answers the first seq", SendPrompt,
          202, PromptAccepted, (*AUTH_ERRORS, 400, 409, 413, 422)),
    Route("POST", "/v1/sessions/{sid}/fork", "fork_session",
          "A new session as this one was at at_seq (its last turn end at or before)",
          ForkSession, 201, Session, (*AUTH_ERRORS, 400, 413, 422)),
    Route("POST", "/v1/sessions/{sid}/cancel", "cancel", "Ask the running turn to stop",
          status=202, answer=Appended, errors=(*AUTH_ERRORS, 409)),
    Route("POST", "/v1/sessions/{sid}/permissions/{request_id}", "answer_permission",
          "Answer a permission request", AnswerPermission, 200, Appended,
          (*AUTH_ERRORS, 400, 409, 413, 422)),
    Route("GET", "/v1/sessions/{sid}/events", "events",
          "Server-Sent Events: replay after the cursor, then live", answer=Resync,
          errors=(*AUTH_ERRORS, 400, 422), kind="sse"),
    Route("POST", "/v1/sessions/{sid}/stream-ticket", "stream_ticket",
          "A one-use ticket (60 s) for ?ticket= on this session's events",
          status=201, answer=StreamTicket),
    Route("GET", "/v1/sessions/{sid}/files/{path}", "get_file",
          "A workspace file's bytes, or a directory listing", answer=DirListing,
          errors=(*AUTH_ERRORS, 400), kind="file_get"),
    Route("PUT", "/v1/sessions/{sid}/files/{path}", "put_file",
          "Write a workspace file (parents created)", answer=FileWritten,
          errors=(*AUTH_ERRORS, 400, 413), kind="file_put"),
    Route("PUT", "/v1/webhooks", "put_webhook",
          "Push this device's events to a URL (Standard Webhooks); a new secret",
          PutWebhook, 200, Webhook, (400, 401, 413, 422, 429, 503)),
    Route("GET", "/v1/webhooks", "get_webhook",
          "This device's webhook and its last deliveries", answer=WebhookView,
          errors=(401, 404, 429, 503)),
    Route("DELETE", "/v1/webhooks", "delete_webhook", "Remove this device's webhook",
          status=204, errors=(401, 429, 503)),
    Route("GET", "/v1/sessions/{sid}/usage", "session_usage",
          "Tokens, sandbox seconds by state and cost of one session",
          answer=SessionUsage),
    Route("GET", "/v1/usage", "usage",
          "This device's usage in [from, to) (RFC 3339; default the last 30 days): "
          "totals and per session", answer=DeviceUsage,
          errors=(401, 422, 429, 503)),
    Route("GET", "/healthz", "healthz", "200 when NATS and JetStream answer",
          answer=Health, errors=(503,), auth=False),
    Route("GET", "/metrics", "metrics", "Prometheus text format", errors=(),
          auth=False, kind="text"),
    Route("GET", "/v1/openapi.json", "openapi", "This document", errors=(), auth=False),
)  # fmt: skip

BY_NAME = {route.name: route for route in ROUTES}

_SSE_PARAMS: list[dict[str, Any]] = [
    {"name": "Last-Event-ID", "in": "header", "required": False,
     "schema": {"type": "integer", "minimum": 0},
     "description": "Resume after this seq (wins over ?after=)"},
    {"name": "after", "in": "query", "required": False,
     "schema": {"type": "integer", "minimum": 0}},
    {"name": "ticket", "in": "query", "required": False,
     "schema": {"type": "string"},
     "description": "A stream ticket instead of Authorization (one use)"},
    {"name": "follow", "in": "query", "required": False,
     "schema": {"type": "string", "enum": ["0", "1", "false", "true"]},
     "description": "0: end after the replay"},
]  # fmt: skip

_WINDOW_PARAMS: list[dict[str, Any]] = [
    {"name": name, "in": "query", "required": False,
     "schema": {"type": "string", "format": "date-time"}, "description": text}
    for name, text in (("from", "Start (default: to minus 30 days)"),
                       ("to", "End, exclusive (default: now)"))
]  # fmt: skip
# Query parameters of JSON routes, by route name.
_QUERY: dict[str, list[dict[str, Any]]] = {
    "list_sessions": [
        {"name": "limit", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 1, "maximum": 200},
         "description": "Page size (default 50 when only cursor is given); "
                        "without limit and cursor the listing is not paged"},
        {"name": "cursor", "in": "query", "required": False,
         "schema": {"type": "string"},
         "description": "next_cursor of the previous page"},
    ],
}  # fmt: skip


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the App API."""
    structs = {ErrorBody} | {t for r in ROUTES for t in (r.body, r.answer) if t}
    _, components = msgspec.json.schema_components(
        sorted(structs, key=lambda t: t.__name__),
        ref_template="#/components/schemas/{name}",
    )
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {"title": "agentbus App API", "version": "1"},
        "components": {
            "schemas": components,
            "securitySchemes": {"device": {"type": "http", "scheme": "bearer"}},
        },
        "paths": paths,
    }


def _operation(route: Route) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": route.name, "summary": route.summary}
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in ("sid", "request_id", "path")
        if "{" + name + "}" in route.path
    ]
    if route.kind == "sse":
        params += _SSE_PARAMS
    if route.name == "usage":
        params += _WINDOW_PARAMS
    params += _QUERY.get(route.name, [])
    if params:
        op["parameters"] = params
    if route.auth:
        op["security"] = [{"device": []}]
    if route.body is not None:
        op["requestBody"] = {"required": True, "content": _json(route.body)}
    if route.kind == "file_put":
        op["requestBody"] = {"required": True, "content": _BYTES}
    responses: dict[str, Any] = {str(route.status): _answer(route)}
    for status in route.errors:
        responses[str(status)] = {
            "description": ERROR_TEXT[status],
            "content": _json(ErrorBody),
        }
    op["responses"] = responses
    return op


def _answer(route: Route) -> dict[str, Any]:
    if route.kind == "sse":
        return {
            "description": "text/event-stream: id = seq, event = type, data = the "
            "stored event; `event: resync` carries the schema below",
            "content": {"text/event-stream": {"schema": _ref(Resync)}},
        }
    if route.status == 204:
        return {"description": route.summary}  # no body
    content: dict[str, Any]
    if route.kind == "file_get":
        content = {**_BYTES, **_json(DirListing)}
    elif route.kind == "text":
        content = {"text/plain": {"schema": {"type": "string"}}}
    elif route.answer is None:
        content = {"application/json": {"schema": {"type": "object"}}}
    else:
        content = _json(route.answer)
    return {"description": route.summary, "content": content}


_BYTES = {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
}


def _json(struct: type[msgspec.Struct]) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(struct)}}


def _ref(struct: type[msgspec.Struct]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{struct.__name__}"}
