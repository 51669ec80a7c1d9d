"""Device authentication (HMAC bearer tokens) and the per-device rate limit."""

from __future__ import annotations

import math
import time
from collections import OrderedDict

from services.gateway.errors import RateLimitedError, UnauthorizedError
from services.gateway.tokens import TokenError, verify

# Devices whose buckets are remembered; the least recently seen are forgotten
# (a forgotten bucket restarts full, which only ever errs towards allowing).
MAX_DEVICES = 100_000


def authenticate(secret: bytes, header: str | None) -> str:
    """The device a ``Authorization: Bearer`` header names; 401 for anything else."""
    if not header or not header.isascii():
        # aiohttp hands undecodable bytes through as surrogates: never a 500.
        raise UnauthorizedError()
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthorizedError()
    try:
        return verify(secret, token.strip())
    except TokenError:
        raise UnauthorizedError() from None


class RateLimiter:
    """A token bucket per device: ``rate`` requests/s, bursts up to ``burst``."""

    def __init__(self, rate: float, burst: int, max_devices: int = MAX_DEVICES) -> None:
        self._rate = rate
        self._burst = float(max(1, burst))
        self._max = max_devices
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def check(self, device_id: str, now: float | None = None) -> None:
        """Spend one token; 429 with ``Retry-After`` when the bucket is empty."""
        if self._rate <= 0:
            return  # limit disabled
        now = time.monotonic() if now is None else now
        tokens, stamp = self._buckets.get(device_id, (self._burst, now))
        tokens = min(self._burst, tokens + (now - stamp) * self._rate)
        if tokens < 1.0:
            self._store(device_id, tokens, now)
            raise RateLimitedError(max(1, math.ceil((1.0 - tokens) / self._rate)))
        self._store(device_id, tokens - 1.0, now)

    def _store(self, device_id: str, tokens: float, now: float) -> None:
        self._buckets[device_id] = (tokens, now)
        self._buckets.move_to_end(device_id)
        if len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
