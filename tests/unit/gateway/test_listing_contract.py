"""The paged listing is in the OpenAPI document, and its cursor round-trips."""

from __future__ import annotations

import pytest

from eventstore.pages import BadCursorError, decode_cursor, encode_cursor
from services.gateway.contract import openapi


def test_openapi_documents_limit_cursor_and_next_cursor():
    doc = openapi()
    op = doc["paths"]["/v1/sessions"]["get"]
    params = {p["name"]: p for p in op["parameters"]}
    assert params["limit"]["in"] == params["cursor"]["in"] == "query"
    assert params["limit"]["schema"]["maximum"] == 200
    assert "422" in op["responses"]
    listed = doc["components"]["schemas"]["SessionList"]
    assert "next_cursor" in listed["properties"]
    assert listed["required"] == ["sessions"]


def test_a_cursor_round_trips_and_foreign_ones_are_refused():
    key = ("2026-11-30T23:00:00.000001Z", "s_abc")
    assert decode_cursor(encode_cursor(key)) == key
    for bad in ("", "!!", "bm90IGpzb24", "WyJhIl0", "WzEsMl0"):
        with pytest.raises(BadCursorError):
            decode_cursor(bad)
