"""Stream-ticket benchmark: what a browser reconnect costs (prints JSON).

Starts its own nats-server and gateway (``bench/sse.py``'s harness). Sequential
requests on one session with one event:
- ``ticket``: ``POST …/stream-ticket`` alone.
- ``reconnect_ticket``: ticket + ``GET …/events?ticket=…&follow=0`` to the end of
  the replay (what the web client does per reconnect; includes the KV one-use mark).
- ``reconnect_header``: ``GET …/events?follow=0`` with ``Authorization`` (baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sse import Bench, pct


async def _timed(n: int, once: Any) -> dict[str, float]:
    took = []
    for _ in range(n):
        started = time.perf_counter()
        await once()
        took.append(time.perf_counter() - started)
    return {"n": n, "p50_ms": pct(took, 0.5), "p99_ms": pct(took, 0.99)}


async def run(n: int) -> dict[str, Any]:
    """The three scenarios, ``n`` requests each."""
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        await bench.start()
        try:
            sid = await bench.session()
            auth = {"Authorization": f"Bearer {bench.token}"}
            events = bench.url(f"/v1/sessions/{sid}/events")

            async def ticket() -> str:
                url = bench.url(f"/v1/sessions/{sid}/stream-ticket")
                async with bench.http.post(url, headers=auth) as r:
                    assert r.status == 201, await r.text()
                    return str((await r.json())["ticket"])

            async def reconnect_ticket() -> None:
                query = f"?ticket={await ticket()}&follow=0"
                async with bench.http.get(events + query) as r:
                    assert r.status == 200, await r.text()
                    await r.read()

            async def reconnect_header() -> None:
                async with bench.http.get(events + "?follow=0", headers=auth) as r:
                    assert r.status == 200
                    await r.read()

            return {
                "bench": "tickets",
                "ticket": await _timed(n, ticket),
                "reconnect_ticket": await _timed(n, reconnect_ticket),
                "reconnect_header": await _timed(n, reconnect_header),
            }
        finally:
            await bench.stop()


def main() -> None:
    """Parse ``-n`` and print the JSON result."""
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.n)), indent=2))


if __name__ == "__main__":
    main()
