"""Decode request bodies and parameters at the edge, with the field at fault."""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec
from aiohttp import web

from services.gateway.errors import (
    InvalidRequestError,
    MalformedHeaderError,
    MalformedRequestError,
    TooLargeError,
)

T = TypeVar("T", bound=msgspec.Struct)

_AT = re.compile(r" - at `(\$[^`]*)`$")
_NAMED = re.compile(r"^Object (?:missing required|contains unknown) field `([^`]+)`")


async def decode_body(request: web.Request, cls: type[T]) -> T:
    """The body as ``cls``: 400 if not JSON, 422 naming the field, 413 if too big."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise TooLargeError("request body too large") from exc
    if not raw.strip():
        raw = b"{}"  # an empty body is an object with no fields
    try:
        return msgspec.json.decode(raw, type=cls)
    except msgspec.ValidationError as exc:
        raise InvalidRequestError(str(exc), field_of(exc)) from exc
    except msgspec.DecodeError as exc:
        raise MalformedRequestError(f"body is not valid JSON: {exc}") from exc


def field_of(exc: msgspec.ValidationError) -> str:
    """The JSON path msgspec reports (``$.metadata.k``), down to a missing field."""
    text = str(exc)
    at = _AT.search(text)
    path = at.group(1) if at else "$"
    named = _NAMED.match(text)
    return f"{path}.{named.group(1)}" if named else path


def cursor_of(request: web.Request) -> int:
    """``Last-Event-ID`` (wins) or ``?after=``; 0 when neither."""
    header = request.headers.get("Last-Event-ID")
    if header is not None and not header.isascii():
        # Undecodable bytes (aiohttp passes them on as surrogates): malformed.
        raise MalformedHeaderError("Last-Event-ID")
    if header is not None and header.strip():
        return _seq(header.strip(), "Last-Event-ID")
    after = request.query.get("after")
    if after is not None:
        return _seq(after, "$.after")
    return 0


def follow_of(request: web.Request) -> bool:
    """``?follow=0`` ends the stream after the replay."""
    value = request.query.get("follow", "1").lower()
    if value in {"1", "true"}:
        return True
    if value in {"0", "false"}:
        return False
    raise InvalidRequestError("follow must be 0 or 1", "$.follow")


def _seq(text: str, field: str) -> int:
    # isascii: str.isdigit() is also true for superscripts (int() refuses them)
    # and other scripts' digits (int() reads them), e.g. in ?after=.
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise InvalidRequestError("a cursor is a non-negative integer seq", field)
    return int(text)
