"""``nats_connection`` against a real nats-server: cluster URL lists, stop, drain."""

from __future__ import annotations

import asyncio

import pytest

from services.common.natsconn import StopRequested, nats_connection
from services.common.natsserver import NatsServerProcess, free_port


async def test_a_url_list_with_one_dead_node_connects_to_the_live_one(
    nats_server: NatsServerProcess,
) -> None:
    dead = f"nats://127.0.0.1:{free_port()}"
    stop = asyncio.Event()
    async with nats_connection(f"{dead},{nats_server.url}", "t", stop=stop) as nc:
        assert nc.connected_url is not None
        assert nc.connected_url.port == nats_server.port
        await nc.flush()
    assert nc.is_closed


async def test_a_stop_set_before_nats_answers_raises_stop_requested() -> None:
    stop = asyncio.Event()
    url = f"nats://127.0.0.1:{free_port()}"

    async def enter() -> None:
        async with nats_connection(url, "t", stop=stop):
            raise AssertionError("connected to a port nothing listens on")

    entering = asyncio.create_task(enter())
    stop.set()
    with pytest.raises(StopRequested, match="stopped while connecting"):
        await asyncio.wait_for(entering, 10.0)
