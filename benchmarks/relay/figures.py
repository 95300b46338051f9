"""From raw per-phase records to figures, ratios, targets and the markdown table.

Every figure is a median over repeats. Added latency is taken per repeat against `direct` in the
same repeat, then the median. "Per proxy core" divides by the CPU seconds the proxy burnt, read
from /proc: on a pinned, saturated proxy that equals the wall-clock rate, and on a noisy
machine it does not reward or punish a system for CPU time stolen by someone else.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.relay.systems import DIRECT, FLOOR, GATEWAY, GATEWAY_REDIS, LITELLM

Record = dict[str, Any]
Figures = dict[str, float | None]
SATURATED_BELOW = 0.95  # a phase that completed less than this share of what it sent...
SATURATED_LAG_S = 1.0  # ...or whose last answers came this long after the sending stopped

# (figure, phase, how to compute it from one record and the direct record of its repeat)
FIGURES: tuple[tuple[str, str, Callable[[Record, Record | None], float | None]], ...] = (
    ("added_p50_ms_at_50", "open50", lambda r, d: _minus(r, d, "p50_ms")),
    ("added_p99_ms_at_50", "open50", lambda r, d: _minus(r, d, "p99_ms")),
    ("added_p50_ms_at_200", "open200", lambda r, d: _minus(r, d, "p50_ms")),
    ("added_p99_ms_at_200", "open200", lambda r, d: _minus(r, d, "p99_ms")),
    ("added_ttft_p50_ms", "ttft50", lambda r, d: _minus(r, d, "ttft_p50_ms")),
    ("added_ttft_p99_ms", "ttft50", lambda r, d: _minus(r, d, "ttft_p99_ms")),
    ("req_per_s", "closed64", lambda r, d: _per(r["ok"], r["wall_s"])),
    ("req_per_core_s", "closed64", lambda r, d: _per(r["ok"], r["proxy_cpu_s"])),
    ("proxy_core_share", "closed64", lambda r, d: _per(r["proxy_cpu_s"], r["wall_s"])),
    ("tokens_per_s", "stream64", lambda r, d: _per(r["tokens"], r["wall_s"])),
    ("tokens_per_core_s", "stream64", lambda r, d: _per(r["tokens"], r["proxy_cpu_s"])),
    (
        "cpu_s_per_1k_req",
        "open200",
        lambda r, d: _per(1000 * r["proxy_cpu_s"], r["ok"]) if r["proxy_cpu_s"] else None,
    ),
)
# (figure, higher is better) for the ratio table
RATIOS = (
    ("req_per_core_s", True),
    ("tokens_per_core_s", True),
    ("added_p50_ms_at_200", False),
    ("added_ttft_p50_ms", False),
    ("cpu_s_per_1k_req", False),
)


def _minus(record: Record, direct: Record | None, key: str) -> float | None:
    if direct is None or record[key] is None or direct[key] is None:
        return None
    return float(record[key] - direct[key])


def _per(amount: float, base: float) -> float | None:
    return amount / base if base else None


def median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(records: list[Record], systems: Sequence[str]) -> dict[str, Figures]:
    direct = {(r["phase"], r["repeat"]): r for r in records if r["system"] == DIRECT}
    summary: dict[str, Figures] = {}
    for system in systems:
        mine = [r for r in records if r["system"] == system]
        figures: Figures = {}
        for name, phase, compute in FIGURES:
            values = [
                compute(r, direct.get((phase, r["repeat"]))) for r in mine if r["phase"] == phase
            ]
            figures[name] = median(values)
        figures |= _load_shares(mine)
        summary[system] = figures
    return summary


def _load_shares(records: list[Record]) -> Figures:
    """The busiest the load core got: the generator alone, and with backend and Redis."""
    loadgen = [r["loadgen_cpu_s"] / r["wall_s"] for r in records if r["wall_s"]]
    core = [
        (r["loadgen_cpu_s"] + r["backend_cpu_s"] + r["redis_cpu_s"]) / r["wall_s"]
        for r in records
        if r["wall_s"]
    ]
    return {
        "loadgen_share_max": max(loadgen, default=None),
        "load_core_share_max": max(core, default=None),
    }


def saturated(records: list[Record], system: str) -> list[str]:
    """Phases in which the system did not keep pace: it failed or dropped more than 5% of
    what it was sent, or was still answering a second after the sending stopped (queueing)."""
    phases = []
    for phase in dict.fromkeys(r["phase"] for r in records):
        mine = [r for r in records if r["system"] == system and r["phase"] == phase]
        sent = sum(r["scheduled"] for r in mine)
        short = sent and sum(r["ok"] for r in mine) < SATURATED_BELOW * sent
        if short or any(r["wall_s"] > r["planned_s"] + SATURATED_LAG_S for r in mine):
            phases.append(phase)
    return phases


def ratios(summary: dict[str, Figures], reference: str) -> dict[str, Figures]:
    base = summary.get(reference)
    if base is None:
        return {}
    table: dict[str, Figures] = {}
    for system, figures in summary.items():
        if system == DIRECT:
            continue
        table[system] = {name: _ratio(figures.get(name), base.get(name)) for name, _ in RATIOS}
    return table


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0:
        return None
    return value / base


def targets(summary: dict[str, Figures]) -> list[dict[str, Any]]:
    """Issue 9's targets, each a ratio from this run (None when a side was not measured)."""
    floor, gateway = summary.get(FLOOR, {}), summary.get(GATEWAY, {})
    litellm, redis = summary.get(LITELLM, {}), summary.get(GATEWAY_REDIS, {})
    checks = (
        ("req/s per core >= 0.6x floor", gateway, floor, "req_per_core_s", 0.6, True),
        ("req/s per core >= 20x LiteLLM", gateway, litellm, "req_per_core_s", 20.0, True),
        ("tokens/s per core >= 0.7x floor", gateway, floor, "tokens_per_core_s", 0.7, True),
        ("added p50 at 200 req/s <= 1.5x floor", gateway, floor, "added_p50_ms_at_200", 1.5, False),
        (
            "Redis store req/s per core >= 0.75x memory",
            redis,
            gateway,
            "req_per_core_s",
            0.75,
            True,
        ),
    )
    rows = []
    for label, mine, base, figure, bound, higher in checks:
        ratio = _ratio(mine.get(figure), base.get(figure))
        met = None if ratio is None else (ratio >= bound if higher else ratio <= bound)
        rows.append({"target": label, "ratio": ratio, "bound": bound, "met": met})
    return rows
