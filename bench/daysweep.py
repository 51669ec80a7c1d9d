"""The T2/T3 sweep, the single-timeout policies and the chart of ``bench/day.py``.

The sweep replays the activity ``day.py`` recorded (each prompt's simulated
start and end) through the broker's timer rules: after the last activity a
sandbox runs for T2, is paused for T3, then archived; a single-timeout policy
runs for T and then archives (no paused tier). ``replay`` at the run's own
timers is compared with the measured cost, so the sweep's error is visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.gateway.prices import GB_MONTH_BYTE_SECONDS, PriceTable

T2_GRID = (60.0, 300.0, 600.0, 1800.0, 3600.0)
T3_GRID = (3600.0, 6 * 3600.0, 86400.0)
SINGLE_GRID = (300.0, 600.0, 1800.0, 3600.0)


@dataclass(frozen=True)
class Activity:
    """One prompt, from its append to its turn's end (simulated unix seconds);
    ``real_s`` is how long the turn really took (not sped up)."""

    start: float
    end: float
    real_s: float = 0.0


def _gaps(acts: list[Activity], day_end: float) -> list[tuple[float, bool]]:
    """Idle gaps after each activity (and whether another prompt ended it)."""
    out = []
    for i, act in enumerate(acts):
        nxt = acts[i + 1].start if i + 1 < len(acts) else day_end
        out.append((max(0.0, nxt - act.end), i + 1 < len(acts)))
    return out


def _policy_seconds(
    activity: dict[str, list[Activity]],
    day_end: float,
    run_s: float,
    pause_s: float,
    real_turns: bool = False,
) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds by state and resumes by tier under "run ``run_s``, pause
    ``pause_s``, then archive" (``pause_s`` 0: a single timeout). With
    ``real_turns`` a turn runs as long as it really took: the accelerated clock
    stretches each real second of a turn into ``speed`` simulated ones. The
    idle gaps (think times, absences) are the simulated ones either way."""
    secs = {"running": 0.0, "paused": 0.0, "archived": 0.0}
    resumes = {"running": 0, "paused": 0, "archived": 0}
    for acts in activity.values():
        acts = sorted(acts, key=lambda a: a.start)
        secs["running"] += sum(
            a.real_s if real_turns else max(0.0, min(a.end, day_end) - a.start)
            for a in acts
        )
        for gap, resumed in _gaps(acts, day_end):
            secs["running"] += min(gap, run_s)
            secs["paused"] += min(max(gap - run_s, 0.0), pause_s)
            secs["archived"] += max(gap - run_s - pause_s, 0.0)
            if resumed:
                tier = (
                    "running"
                    if gap <= run_s
                    else "paused"
                    if gap <= run_s + pause_s
                    else "archived"
                )
                resumes[tier] += 1
    return secs, resumes


def _cost(secs: dict[str, float], mean_bytes: float, prices: PriceTable) -> float:
    gb_months = secs["archived"] * mean_bytes / GB_MONTH_BYTE_SECONDS
    return (
        secs["running"] * prices.running_per_s
        + secs["paused"] * prices.paused_per_s
        + gb_months * prices.archived_gb_month
    )


def replay(
    activity: dict[str, list[Activity]],
    arrivals: dict[str, float],
    day_end: float,
    t2: float,
    t3: float,
    mean_bytes: float,
    prices: PriceTable,
    real_turns: bool = False,
) -> float:
    """The sandbox cost of the tiered policy (T2, T3) over the recorded activity."""
    secs, _ = _policy_seconds(activity, day_end, t2, t3, real_turns)
    return _cost(secs, mean_bytes, prices)


def sweep(
    activity: dict[str, list[Activity]],
    arrivals: dict[str, float],
    day_end: float,
    mean_bytes: float,
    prices: PriceTable,
    plan_a: float,
) -> list[dict[str, Any]]:
    """Cost ratio vs plan A and resumes by tier for each policy of the grids."""
    rows: list[dict[str, Any]] = []
    policies = [("tiered", t2, t3) for t3 in T3_GRID for t2 in T2_GRID]
    policies += [("single", t, 0.0) for t in SINGLE_GRID]
    for kind, run_s, pause_s in policies:
        secs, resumes = _policy_seconds(activity, day_end, run_s, pause_s, True)
        cost = _cost(secs, mean_bytes, prices)
        row: dict[str, Any] = {"policy": kind}
        row.update({"T2": run_s, "T3": pause_s} if kind == "tiered" else {"T": run_s})
        row["cost_ratio_vs_plan_a"] = round(cost / plan_a, 4) if plan_a else None
        row["resumes"] = resumes
        rows.append(row)
    return rows


def timeline(
    states: dict[str, list[tuple[float, str | None]]],
    window: tuple[float, float],
    points: int = 240,
) -> dict[str, list[float]]:
    """Sandboxes in each billed state across the day (from the measured events)."""
    start, end = window
    out: dict[str, list[float]] = {
        "t_h": [],
        "running": [],
        "paused": [],
        "archived": [],
    }
    for i in range(points + 1):
        t = start + (end - start) * i / points
        out["t_h"].append(round((t - start) / 3600, 3))
        counts = {"running": 0, "paused": 0, "archived": 0}
        for moves in states.values():
            current = None
            for at, state in moves:
                if at > t:
                    break
                current = state
            if current in counts:
                counts[current] += 1
        for state, n in counts.items():
            out[state].append(n)
    return out


def chart(
    grid: list[dict[str, Any]],
    lines: dict[str, list[float]],
    path: Path,
    window: tuple[float, float],
) -> None:
    """Cost vs T2 (a line per T3, and the single timeout) and states over the day."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for t3 in T3_GRID:
        rows = [r for r in grid if r["policy"] == "tiered" and r["T3"] == t3]
        left.plot(
            [r["T2"] / 60 for r in rows],
            [r["cost_ratio_vs_plan_a"] for r in rows],
            marker="o",
            label=f"pause T2, archive after T3={t3 / 3600:g} h",
        )
    single = [r for r in grid if r["policy"] == "single"]
    left.plot(
        [r["T"] / 60 for r in single],
        [r["cost_ratio_vs_plan_a"] for r in single],
        marker="s",
        linestyle="--",
        label="single timeout T (archive)",
    )
    left.axhline(0.2, color="grey", linewidth=0.8, linestyle=":", label="target 0.20")
    left.set(xscale="log", xlabel="T2 or T (minutes)", ylabel="sandbox cost / plan A")
    left.set_title("Cost against the timers")
    left.legend(fontsize=8)
    right.stackplot(
        lines["t_h"],
        lines["running"],
        lines["paused"],
        lines["archived"],
        labels=["running", "paused", "archived"],
    )
    right.set(xlabel="hour of the simulated day", ylabel="sandboxes")
    right.set_title("Sandboxes by state (measured)")
    right.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
