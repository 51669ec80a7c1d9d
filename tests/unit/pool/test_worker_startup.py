"""A worker's start-up outlasts a busy bus instead of exiting on the first timeout."""

from __future__ import annotations

import nats.errors
import pytest
from nats.js.errors import BadRequestError, ServiceUnavailableError

from services.pool.worker import _patiently


async def test_timeouts_and_unavailability_are_waited_out() -> None:
    failures = [TimeoutError(), nats.errors.TimeoutError(), ServiceUnavailableError()]
    calls = 0

    async def declare() -> str:
        nonlocal calls
        calls += 1
        if failures:
            raise failures.pop(0)
        return "buckets"

    assert await _patiently("buckets", declare, delay=0.0) == "buckets"
    assert calls == 4


async def test_any_other_error_is_not_retried() -> None:
    calls = 0

    async def declare() -> str:
        nonlocal calls
        calls += 1
        raise BadRequestError(description="bucket config refused")

    with pytest.raises(BadRequestError, match="bucket config refused"):
        await _patiently("buckets", declare, delay=0.0)
    assert calls == 1
