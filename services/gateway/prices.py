"""The price table behind ``cost`` in the usage API (and ``bench/day.py``).

Sandbox time is priced per second by billed state; archived workspace bytes per
GB-month (GiB, 30-day month); model tokens per million by model, with ``*``
pricing a model the table does not name. Defaults and their sources are in
``GatewaySettings``.
"""

from __future__ import annotations

import math

import msgspec

GB_MONTH_BYTE_SECONDS = float(1 << 30) * 30 * 86400


class PriceError(ValueError):
    """``AGENTBUS_USAGE_MODEL_PRICES`` is malformed; the message says where."""


class ModelPrice(msgspec.Struct, frozen=True):
    """USD per million tokens: fresh input, output, input read from a cache."""

    input: float
    output: float
    cached: float


class PriceTable(msgspec.Struct, frozen=True, kw_only=True):
    """Every price the usage API multiplies by."""

    running_per_s: float
    paused_per_s: float
    archived_gb_month: float
    models: dict[str, ModelPrice]

    def model(self, name: str) -> ModelPrice:
        """The price of ``name``, else of ``*``, else free (an unpriced model)."""
        return self.models.get(name) or self.models.get("*") or ModelPrice(0, 0, 0)


def parse_model_prices(text: str) -> dict[str, ModelPrice]:
    """``"name=in/out/cached,..."`` → prices; :class:`PriceError` names a bad entry."""
    out: dict[str, ModelPrice] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, rates = entry.partition("=")
        parts = rates.split("/")
        if not sep or not name.strip() or len(parts) != 3:
            raise PriceError(
                f"model price {entry!r}: expected name=input/output/cached"
            )
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise PriceError(f"model price {entry!r}: not a number") from None
        if any(v < 0 or not math.isfinite(v) for v in values):
            raise PriceError(f"model price {entry!r}: prices must be finite and >= 0")
        out[name.strip()] = ModelPrice(*values)
    return out


def price_table(
    running_per_s: float,
    paused_per_s: float,
    archived_gb_month: float,
    model_prices: str,
) -> PriceTable:
    """A checked table (negative or non-finite prices are refused)."""
    for label, value in (
        ("usage_price_running_per_s", running_per_s),
        ("usage_price_paused_per_s", paused_per_s),
        ("usage_price_archived_gb_month", archived_gb_month),
    ):
        if value < 0 or not math.isfinite(value):
            raise PriceError(f"{label}: must be finite and >= 0 (got {value})")
    return PriceTable(
        running_per_s=running_per_s,
        paused_per_s=paused_per_s,
        archived_gb_month=archived_gb_month,
        models=parse_model_prices(model_prices),
    )
