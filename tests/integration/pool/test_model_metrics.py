"""The pool's ``/metrics``: model retries counted in its worker processes."""

from __future__ import annotations

import asyncio

import aiohttp

from services.common.natsserver import free_port
from tests.integration.pool.harness import Harness
from tests.support.fake_openai import FakeOpenAI, Status, Stream, answer, text_chunks


async def scrape(url: str, wanted: list[str], timeout: float = 20.0) -> str:
    """The metrics text once it holds every line of ``wanted``."""
    text = ""
    async with asyncio.timeout(timeout), aiohttp.ClientSession() as http:
        while not all(line in text for line in wanted):
            try:
                async with http.get(url) as resp:
                    text = await resp.text()
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
    return text


async def test_retries_and_their_time_are_in_the_pools_metrics(
    harness: Harness, fake_openai: FakeOpenAI
) -> None:
    port = free_port()
    fake_openai.push(
        Status(503, {"error": {"message": "busy"}}),
        Stream(text_chunks("half"), done=False, clean=True),
        answer("whole"),
    )
    harness.pool_process(
        model="openai",
        model_base_url=fake_openai.url,
        model_retry_base_s=0.01,
        pool_metrics_port=port,
    )
    sid = await harness.session()
    _, turn = await harness.prompt(sid, "hello")
    ended = await harness.ended(sid, turn)
    assert ended.data.usage.retry_causes == {"http_503": 1, "truncated": 1}
    text = await scrape(
        f"http://127.0.0.1:{port}/metrics",
        [
            'agentbus_model_retries_total{cause="http_503"} 1.0',
            'agentbus_model_retries_total{cause="truncated"} 1.0',
        ],
    )
    seconds = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("agentbus_model_retry_seconds_total{")
    ]
    assert len(seconds) == 2
    assert all(s > 0 for s in seconds)
