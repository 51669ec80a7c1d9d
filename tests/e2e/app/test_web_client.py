"""The web client at /app in headless Chromium against a real `agentbus up` stack.

Set ``APP_SCREENSHOTS_DIR=docs/screenshots`` to refresh the screenshots in docs/.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.eventually import eventually

from .conftest import CHROMIUM_ARGS, Stack, chromium_or_skip

playwright_api = pytest.importorskip("playwright.async_api")
expect = playwright_api.expect
# Waits for the backend (a shared 2-core box under a parallel suite) get room.
expect.set_options(timeout=20_000)

pytestmark = pytest.mark.timeout(240)
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[object]:
    """Debian's chromium, driven by playwright."""
    path = chromium_or_skip()
    async with playwright_api.async_playwright() as p:
        b = await p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        await b.close()


def shots(tmp_path: Path) -> Path:
    out = Path(os.environ.get("APP_SCREENSHOTS_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


async def api(stack: Stack, method: str, path: str, body: object = None) -> object:
    headers = {"Authorization": f"Bearer {stack.token()}"}
    async with aiohttp.ClientSession(headers=headers) as http:  # noqa: SIM117
        async with http.request(method, stack.base + path, json=body) as r:
            assert r.status < 300, await r.text()
            return await r.json()


async def logged(stack: Stack, sid: str) -> list[dict]:
    """The session's whole log as the API serves it (replay only)."""
    headers = {"Authorization": f"Bearer {stack.token()}"}
    async with aiohttp.ClientSession(headers=headers) as http:  # noqa: SIM117
        async with http.get(f"{stack.base}/v1/sessions/{sid}/events?follow=0") as r:
            text = await r.text()
    return [
        json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")
    ]


async def until_logged(stack, sid, predicate, what, timeout=90.0) -> list[dict]:
    async def matched() -> tuple[list[dict]] | None:
        events = await logged(stack, sid)
        return (events,) if predicate(events) else None

    found = await eventually(matched, timeout, what=what, interval=0.1)
    return found[0]


async def signed_in(browser, stack: Stack, viewport=DESKTOP, context=None):
    context = context or await browser.new_context(viewport=viewport)
    page = await context.new_page()
    await page.goto(f"{stack.base}/app")
    await page.fill("#token", stack.token())
    await page.click("#signin-form button[type=submit]")
    await expect(page.locator("#list")).to_be_visible()
    return context, page


async def rendered_seqs(page) -> tuple[list[int], list[int]]:
    """Every rendered seq in document order, and each top block's first seq."""
    every = [int(s) for s in await page.locator("[data-seq]").evaluate_all(
        "els => els.map(e => e.dataset.seq)")]  # fmt: skip
    blocks = await page.locator("#transcript > .ev").evaluate_all(
        "els => els.map(e => Math.min(...[e, ...e.querySelectorAll('[data-seq]')]"
        ".filter(x => x.dataset.seq).map(x => +x.dataset.seq)))"
    )
    return every, blocks


async def assert_each_seq_once(page, stack: Stack, sid: str) -> None:
    """The page shows every logged seq exactly once (events may still arrive)."""
    events = await logged(stack, sid)
    last = events[-1]["seq"]
    await expect(page.locator(f"[data-seq='{last}']")).to_have_count(1)
    every, blocks = await rendered_seqs(page)
    assert len(every) == len(set(every)), "no seq twice"
    assert sorted(every) == list(range(1, max(every) + 1)), "no seq missing"
    assert sorted(every)[: len(events)] == [e["seq"] for e in events]
    assert blocks == sorted(blocks), "blocks in seq order"


def unanswered(events: list[dict]) -> list[str]:
    asked = [
        e["data"]["request_id"] for e in events if e["type"] == "permission.requested"
    ]
    done = {
        e["data"]["request_id"] for e in events if e["type"] == "permission.resolved"
    }
    return [r for r in asked if r not in done]


async def test_demo_through_an_offline_drop_shows_each_seq_once_in_order(
    stack, browser, tmp_path
):
    context, page = await signed_in(browser, stack)
    await page.fill("#new-title", "calculator")
    await page.click("#create-form button")
    await expect(page.locator("[data-type='session.created']")).to_have_count(1)
    sid = page.url.rsplit("/", 1)[1]
    await page.fill("#prompt", "build me a calculator")
    await page.press("#prompt", "Enter")
    ask = page.locator(".ev.ask:not(.resolved)")
    await expect(ask).to_have_count(1, timeout=TIMEOUT_MS)
    await expect(page.locator("#s-status")).to_have_text("awaiting permission")
    await page.screenshot(path=shots(tmp_path) / "desktop-approval.png")
    await ask.locator("button[data-option=allow_once]").click()
    await expect(page.locator(".ev.ask.resolved")).to_have_count(1)

    await context.set_offline(True)  # mid-turn: the next ask arrives while offline
    await expect(page.locator("#conn")).to_have_text("offline")
    await answer_until_ended(stack, sid)  # bash again, then terminal and code
    assert not await page.locator("[data-type='turn.ended']").count()
    await context.set_offline(False)
    await expect(page.locator("#conn")).to_have_text("live", timeout=TIMEOUT_MS)
    await expect(page.locator("[data-type='turn.ended']")).to_have_count(1)

    await assert_each_seq_once(page, stack, sid)
    assert await page.locator(".ev.tool pre.diff .add").count() > 0  # write/edit diffs
    assert await page.locator(".ev.tool pre.diff .del").count() > 0
    await expect(page.locator("#s-status")).to_have_text("idle")
    await page.screenshot(path=shots(tmp_path) / "desktop-transcript.png")
    await page.locator("#transcript").evaluate("t => { t.scrollTop = 0; }")
    await page.screenshot(path=shots(tmp_path) / "desktop-transcript-top.png")
    await context.close()


async def test_two_tabs_follow_one_session_and_share_an_approval(stack, browser):
    session = await api(stack, "POST", "/v1/sessions", {"title": "two tabs"})
    sid = session["session_id"]
    context, first = await signed_in(browser, stack)
    second = await context.new_page()
    for page in (first, second):
        await page.goto(f"{stack.base}/app#/s/{sid}")
        await expect(page.locator("#conn")).to_have_text("live")
    await first.fill("#prompt", "build me a calculator")
    await first.press("#prompt", "Enter")
    for page in (first, second):
        await expect(page.locator(".ev.ask:not(.resolved)")).to_have_count(
            1, timeout=TIMEOUT_MS
        )
    for asked in range(1, 4):  # bash, then the demo's terminal and code
        for page in (first, second):
            await expect(page.locator(".ev.ask:not(.resolved)")).to_have_count(
                1, timeout=TIMEOUT_MS
            )
        pending = second.locator(".ev.ask:not(.resolved)")
        await pending.locator("button[data-option=allow_always]").click()
        for page in (first, second):
            await expect(page.locator(".ev.ask.resolved")).to_have_count(asked)
    for page in (first, second):
        await expect(page.locator("[data-type='turn.ended']")).to_have_count(
            1, timeout=TIMEOUT_MS
        )
    for page in (first, second):
        await assert_each_seq_once(page, stack, sid)
    await context.close()


async def test_files_panel_uploads_views_and_downloads(stack, browser, tmp_path):
    session = await api(stack, "POST", "/v1/sessions", {"title": "files"})
    sid = session["session_id"]
    context, page = await signed_in(browser, stack)
    await page.goto(f"{stack.base}/app#/s/{sid}")
    await page.click("#files-toggle")
    await expect(page.locator("#files-path")).to_have_text("/workspace/")
    payload = "hello from the browser\nsecond line\n"
    local = tmp_path / "notes.txt"
    local.write_text(payload)
    await page.set_input_files("#upload", str(local))
    item = page.locator("#files-list li[data-path='notes.txt'] button")
    await expect(item).to_be_visible(timeout=TIMEOUT_MS)
    headers = {"Authorization": f"Bearer {stack.token()}"}
    async with aiohttp.ClientSession(headers=headers) as http:  # noqa: SIM117
        async with http.get(f"{stack.base}/v1/sessions/{sid}/files/notes.txt") as r:
            assert await r.text() == payload
    await item.click()
    await expect(page.locator("#file-body")).to_have_text(payload)
    await page.screenshot(path=shots(tmp_path) / "desktop-files.png")
    async with page.expect_download() as info:
        await page.click("#file-download")
    download = await info.value
    saved = tmp_path / "downloaded.txt"
    await download.save_as(saved)
    assert saved.read_text() == payload
    assert download.suggested_filename == "notes.txt"
    await context.close()


async def run_demo(stack: Stack, title: str) -> str:
    """A session whose demo turn ran to its end (approvals answered via the API)."""
    sid = (await api(stack, "POST", "/v1/sessions", {"title": title}))["session_id"]
    await api(stack, "POST", f"/v1/sessions/{sid}/prompt", {"text": "build it"})
    await answer_until_ended(stack, sid)
    return sid


async def answer_until_ended(stack: Stack, sid: str) -> None:
    """Answer every approval "allow always" (API) until the turn ends."""

    def ended(events: list[dict]) -> bool:
        return any(e["type"] == "turn.ended" for e in events) or bool(
            unanswered(events)
        )

    while True:
        events = await until_logged(stack, sid, ended, "an approval or the end")
        if not unanswered(events):
            return
        rid = unanswered(events)[0]
        path = f"/v1/sessions/{sid}/permissions/{rid}"
        await api(stack, "POST", path, {"option": "allow_always"})


async def test_phone_sized_views(stack, browser, tmp_path):
    sid = await run_demo(stack, "phone demo")
    context = await browser.new_context(viewport=PHONE, device_scale_factor=2)
    page = await context.new_page()
    await page.goto(f"{stack.base}/app")
    await expect(page.locator("#signin")).to_be_visible()
    await page.screenshot(path=shots(tmp_path) / "phone-signin.png")
    await page.fill("#token", "v1.nobody.1.forged")
    await page.click("#signin-form button[type=submit]")
    await expect(page.locator("#signin-error")).to_have_text("That token was refused.")
    await signed_in(browser, stack, context=context)
    page = context.pages[-1]
    await expect(page.locator(".session-item").first).to_be_visible()
    await page.screenshot(path=shots(tmp_path) / "phone-sessions.png")
    await page.locator(f".session-item[data-sid='{sid}'] a").click()
    await expect(page.locator("[data-type='turn.ended']").first).to_be_visible()
    width = await page.locator("body").evaluate("b => b.scrollWidth")
    assert width <= PHONE["width"], "no sideways scrolling on a phone"
    await page.screenshot(path=shots(tmp_path) / "phone-transcript.png")
    await page.locator("#transcript").evaluate("t => { t.scrollTop = 300; }")
    await page.screenshot(path=shots(tmp_path) / "phone-transcript-tools.png")
    await context.close()


async def test_prompts_queue_while_a_turn_runs_and_stop_and_close_work(stack, browser):
    session = await api(stack, "POST", "/v1/sessions", {"title": "queue"})
    sid = session["session_id"]
    context, page = await signed_in(browser, stack)
    await page.goto(f"{stack.base}/app#/s/{sid}")
    await expect(page.locator("#conn")).to_have_text("live")
    await page.fill("#prompt", "build me a calculator")
    await page.press("#prompt", "Enter")
    await expect(page.locator(".ev.ask:not(.resolved)")).to_have_count(
        1, timeout=TIMEOUT_MS
    )
    await page.fill("#prompt", "and now a second one")
    await page.press("#prompt", "Enter")
    await expect(page.locator("#s-queued")).to_have_text("1 queued")
    await page.click("#cancel")
    await expect(page.locator("[data-type='turn.cancel_requested']")).to_have_count(1)
    # Answering after Stop is harmless: the cancelled turn ends either way (a
    # parked turn is woken by the cancel itself).
    await page.locator(".ev.ask button[data-option=allow_always]").click()
    ended = page.locator("[data-type='turn.ended']")
    await expect(ended.first).to_contain_text("cancelled", timeout=TIMEOUT_MS)
    await expect(page.locator("[data-type='turn.started']")).to_have_count(2)
    await expect(page.locator("#s-queued")).to_be_hidden()
    await page.click("#cancel")  # the queued turn, wherever it is by now
    await expect(ended).to_have_count(2, timeout=TIMEOUT_MS)
    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
    await page.click("#close-session")
    await expect(page.locator("#s-status")).to_have_text("closed")
    await expect(page.locator("#prompt")).to_be_disabled()
    assert (await api(stack, "GET", f"/v1/sessions/{sid}"))["status"] == "closed"
    await context.close()
