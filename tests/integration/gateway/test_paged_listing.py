"""``GET /v1/sessions?limit=&cursor=`` against a real gateway and nats-server."""

from __future__ import annotations

from typing import Any

import aiohttp

from .conftest import auth, create_session, start_gateway


async def page(
    http: aiohttp.ClientSession, base: str, device: str, query: str
) -> tuple[int, Any]:
    url = f"{base}/v1/sessions?{query}"
    async with http.get(url, headers=auth(device)) as r:
        return r.status, await r.json()


async def walk(http, base: str, device: str, limit: int) -> list[list[str]]:
    """Every page's session ids, following next_cursor to the end."""
    pages: list[list[str]] = []
    query = f"limit={limit}"
    while True:
        status, body = await page(http, base, device, query)
        assert status == 200, body
        pages.append([s["session_id"] for s in body["sessions"]])
        if "next_cursor" not in body:
            return pages
        query = f"limit={limit}&cursor={body['next_cursor']}"


async def test_pages_cover_every_session_newest_first_once(gateway, http):
    sids = [
        await create_session(http, gateway, "pager", title=f"t{i}") for i in range(7)
    ]
    await create_session(http, gateway, "not-pager")
    pages = await walk(http, gateway.base, "pager", 3)
    assert pages == [sids[6:3:-1], sids[3:0:-1], sids[0:1]]
    # The unpaged listing is unchanged: everything, no next_cursor.
    async with http.get(f"{gateway.base}/v1/sessions", headers=auth("pager")) as r:
        full = await r.json()
    assert set(full) == {"sessions"}
    assert [s["session_id"] for s in full["sessions"]] == sids[::-1]


async def test_sessions_created_between_pages_show_up_on_the_first_page(gateway, http):
    old = [await create_session(http, gateway, "grower") for _ in range(3)]
    status, first = await page(http, gateway.base, "grower", "limit=2")
    assert status == 200, first
    assert [s["session_id"] for s in first["sessions"]] == old[:0:-1]
    new = await create_session(http, gateway, "grower")
    # The cursor still continues where the first page ended ...
    _, second = await page(
        http, gateway.base, "grower", f"limit=2&cursor={first['next_cursor']}"
    )
    assert [s["session_id"] for s in second["sessions"]] == [old[0]]
    assert "next_cursor" not in second
    # ... and a fresh first page has the new session, with its folded state.
    _, again = await page(http, gateway.base, "grower", "limit=1")
    assert again["sessions"][0]["session_id"] == new
    assert again["sessions"][0]["status"] == "idle"
    assert again["sessions"][0]["last_seq"] == 1


async def test_a_cursor_works_on_another_gateway(
    gateway, http, nats_server, gw_prefix, tmp_path
):
    sids = [await create_session(http, gateway, "roamer") for _ in range(4)]
    _, first = await page(http, gateway.base, "roamer", "limit=3")
    other = await start_gateway(nats_server.url, gw_prefix, tmp_path)
    try:
        _, rest = await page(
            http, other.base, "roamer", f"limit=3&cursor={first['next_cursor']}"
        )
    finally:
        assert other.stop() == 0, other.logs()
    assert [s["session_id"] for s in rest["sessions"]] == [sids[0]]


async def test_bad_limit_and_cursor_are_422_naming_the_field(gateway, http):
    for query, field in (
        ("limit=0", "$.limit"),
        ("limit=201", "$.limit"),
        ("limit=abc", "$.limit"),
        ("limit=99999999999999999999", "$.limit"),
        ("cursor=%21%21not-ours", "$.cursor"),
        ("cursor=WyJhIl0", "$.cursor"),  # base64 of ["a"]: not a pair
    ):
        status, body = await page(http, gateway.base, "bad-pager", query)
        assert status == 422, (query, body)
        assert body["error"]["field"] == field


async def test_another_devices_sessions_never_appear_in_its_pages(gateway, http):
    mine = await create_session(http, gateway, "owner-a")
    await create_session(http, gateway, "owner-b")
    _, body = await page(http, gateway.base, "owner-a", "limit=200")
    assert [s["session_id"] for s in body["sessions"]] == [mine]
    _, empty = await page(http, gateway.base, "owner-c", "limit=5")
    assert empty == {"sessions": []}


async def test_the_unpaged_listing_of_many_sessions_equals_the_pages(gateway, http):
    # More than one chunk of 200 summaries (commands.LIST_CHUNK).
    for _ in range(205):  # one by one: distinct created_at, one order
        await create_session(http, gateway, "many")
    async with http.get(f"{gateway.base}/v1/sessions", headers=auth("many")) as r:
        full = [s["session_id"] for s in (await r.json())["sessions"]]
    pages = await walk(http, gateway.base, "many", 200)
    assert len(full) == 205
    assert full == [sid for page in pages for sid in page]
