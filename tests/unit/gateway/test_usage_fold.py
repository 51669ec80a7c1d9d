"""The price table's parser and the usage fold (clipping, archive GB-months)."""

from __future__ import annotations

import pytest

from schemas.events import Event, Payload, SandboxUsage, TurnEnded, Usage
from services.gateway.prices import (
    GB_MONTH_BYTE_SECONDS,
    ModelPrice,
    PriceError,
    parse_model_prices,
    price_table,
)
from services.gateway.usage_fold import UsageFold, add_up

PRICES = price_table(2.0, 1.0, 3.0, "m=1/2/0.5,*=10/10/10")


def ev(data: Payload, ts: str = "2026-01-01T00:00:00Z") -> Event:
    return Event(
        session_id="s", seq=1, id="e", type=data.TYPE, ts=ts, actor="a", data=data
    )


def moved(
    state: str | None, seconds: float, nxt: str | None, at: float, b: int = 0
) -> Event:
    return ev(
        SandboxUsage(
            state=state, seconds=seconds, next_state=nxt, at=at, archive_bytes=b
        )
    )  # type: ignore[arg-type]


def test_model_prices_parse_and_unknown_models_take_the_star_price() -> None:
    table = parse_model_prices(" a=1/2/3 , *=0.5/0.5/0 ")
    assert table == {"a": ModelPrice(1, 2, 3), "*": ModelPrice(0.5, 0.5, 0)}
    assert PRICES.model("nobody") == ModelPrice(10, 10, 10)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("a=1/2", "expected name=input/output/cached"), ("=1/2/3", "expected"),
     ("a=1/x/3", "not a number"), ("a=1/-2/3", ">= 0"), ("a=1/inf/3", "finite")],
)  # fmt: skip
def test_a_bad_model_price_names_the_entry(text: str, problem: str) -> None:
    with pytest.raises(PriceError, match=problem):
        parse_model_prices(text)


def test_a_negative_sandbox_price_is_refused() -> None:
    with pytest.raises(PriceError, match="usage_price_paused_per_s"):
        price_table(1.0, -1.0, 1.0, "")


def test_intervals_are_clipped_to_the_window_and_the_open_state_runs_to_now() -> None:
    fold = UsageFold(PRICES, start=150, end=1000)
    for e in (
        moved(None, 0, "running", 100),
        moved("running", 100, "paused", 200),
        moved("paused", 300, "archived", 500, b=1 << 30),
    ):
        fold.add(e)
    got = fold.result("s", now=700)
    assert got.sandbox_seconds.running == 50  # 150..200
    assert got.sandbox_seconds.paused == 300
    assert got.sandbox_seconds.archived == 200  # 500..now
    assert got.archive_gb_months == pytest.approx(
        200 * (1 << 30) / GB_MONTH_BYTE_SECONDS
    )
    assert got.cost.running == 100.0
    assert got.cost.paused == 300.0
    assert got.cost.archived == pytest.approx(3.0 * got.archive_gb_months)


def test_turn_tokens_are_priced_by_model_with_cached_input_apart() -> None:
    fold = UsageFold(PRICES)
    usage = Usage(
        input_tokens=3_000_000, output_tokens=1_000_000, cached_input_tokens=1_000_000
    )
    fold.add(ev(TurnEnded(turn_id="t", stop_reason="end_turn", usage=usage, model="m")))
    got = fold.result("s", now=0)
    assert (got.tokens.input, got.tokens.output, got.tokens.cached) == (
        3_000_000,
        1_000_000,
        1_000_000,
    )
    assert (got.cost.input_tokens, got.cost.output_tokens, got.cost.cached_tokens) == (
        2.0,
        2.0,
        0.5,
    )
    assert got.cost.total == 4.5


def test_turns_outside_the_window_do_not_count_and_sums_add_up() -> None:
    fold = UsageFold(PRICES, start=0, end=1)  # 1970: every 2026 turn is outside
    fold.add(
        ev(TurnEnded(turn_id="t", stop_reason="end_turn", usage=Usage(output_tokens=5)))
    )
    assert fold.result("s", now=0).turns == 0
    inside = UsageFold(PRICES)
    inside.add(
        ev(TurnEnded(turn_id="t", stop_reason="end_turn", usage=Usage(output_tokens=5)))
    )
    one = inside.result("s", now=0)
    both = add_up([one, one])
    assert (both.tokens.output, both.turns, both.cost.total) == (
        10,
        2,
        2 * one.cost.total,
    )
