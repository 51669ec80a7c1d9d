"""``schemas.ids``: the timestamp format every event carries."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest

from schemas import ids
from schemas.ids import now_rfc3339

RFC3339_MICROS_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def test_now_is_rfc3339_utc_with_microseconds_and_z() -> None:
    before = datetime.now(UTC)
    stamp = now_rfc3339()
    after = datetime.now(UTC)
    assert RFC3339_MICROS_Z.fullmatch(stamp)
    assert before <= datetime.fromisoformat(stamp) <= after


@pytest.mark.parametrize(
    "ns",
    [
        1_000_000_000,
        1_700_000_000_000_000_000,  # a plain second
        1_700_000_000_999_999_999,  # last microsecond of a second
        1_704_067_199_999_999_000,  # 2023-12-31T23:59:59.999999: the year turns next
        1_709_164_800_000_001_000,  # 2024-02-29 (leap day)
    ],
)
def test_the_cached_second_formats_as_datetime_does(
    ns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    for moment in (ns, ns + 1000, ns - 1_000_000_000):  # again, +1 µs, a second back
        monkeypatch.setattr(time, "time_ns", lambda m=moment: m)
        assert now_rfc3339() == _formatted(moment)
        assert ids._second[0] == moment // 1_000_000_000


def _formatted(ns: int) -> str:
    moment = datetime.fromtimestamp(ns // 10**9, UTC)
    moment = moment.replace(microsecond=ns // 1000 % 10**6)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
