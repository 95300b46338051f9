"""The SLO report: per-class and per-tenant metrics from request records, and the verdict.

Both drivers (live Locust run, offline simulation) produce `LoadRecord`s; `summarize` turns
them into the same `Summary`, so live and offline numbers mean the same thing.

Per group (all requests; each class; each tenant; each class × tenant)
    count, ok, shed, errors and their rates over count
    admitted        count − shed (what passed admission and tenant limits)
    ttft/tpot/e2e   p50, p95, p99 over successful requests (linear interpolation)
    attainment      share of *all* requests that succeeded and met every target of their class
                    (TTFT ≤ ttft_ms, TPOT ≤ tpot_ms when more than one token, E2E ≤ deadline_ms),
                    so shed and failed requests count as misses
    goodput_rps     requests meeting their SLO per second of the run (arrival span)
    goodput_share   the group's share of all requests meeting their SLO (tenant fairness)
    cost            Σ over successful requests of tokens × the serving endpoint's prices, cached
                    prompt tokens at its cached rate (gateway/core/accounting.py, as live billing)
Per endpoint (gateway/offline/endpoint_split.py)
    split           requests served and their cost, per endpoint that answered
    coverage        per class and per endpoint × class: the share of served requests whose
                    TTFT (TPOT) came within the p95 the policy predicted for them
Run-level metrics: attempts_ratio (upstream attempts / requests the gateway forwarded: a retry
storm shows as > 1), lateness_p99_s (load-generator lag, a validity check for live runs),
preemptions (engine preemptions during the run) and recovery_s (after the scenario's
`recovery_from_s`, when the first window of `window_s` starts whose attainment is back at
`recovery_target` in every class; None when it never is).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gateway.bench.percentile import percentile
from gateway.config.settings import Price, SloClassConfig
from gateway.core import slo
from gateway.offline.endpoint_split import Coverage, EndpointShare, coverage, record_cost, split
from gateway.offline.records import LoadRecord
from gateway.offline.scenario import Check, Scenario

ALL = "all"


def record_meets_slo(record: LoadRecord, target: SloClassConfig) -> bool:
    """The live judgement (gateway/core/slo.py) applied to one record."""
    return slo.meets_slo(
        target.target(record.slo_class),
        ok=record.outcome == "ok",
        ttft_s=record.ttft_s,
        tpot_s=record.tpot_s,
        e2e_s=record.e2e_s if record.e2e_s is not None else math.inf,
        stream=record.stream,
        output_tokens=record.output_tokens,
    )


@dataclass(frozen=True, slots=True)
class GroupStats:
    count: int = 0
    ok: int = 0
    shed: int = 0
    errors: int = 0
    admitted: int = 0
    success_rate: float = 0.0
    shed_rate: float = 0.0
    error_rate: float = 0.0
    attainment: float = 0.0
    good: int = 0
    goodput_rps: float = 0.0
    goodput_share: float = 0.0
    cost: float = 0.0
    cached_share: float = 0.0  # 0..1: prompt tokens of served requests found in a cache
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p95_s: float | None = None
    tpot_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Window:
    start_s: float
    arrivals: int
    in_flight: float  # mean concurrent requests over the window
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_p99_s: float | None
    attainment: dict[str, float | None]  # by class (None: no arrivals of it)
    served: int = 0  # requests answered whole in this window (offered: `arrivals`)
    cost: float = 0.0  # of the requests arriving in this window and served
    # of the requests arriving in this window: met their SLO (goodput), refused by admission
    # or a limit (shed), answered but late (missed a target)
    met: int = 0
    refused: int = 0
    late: int = 0


@dataclass(frozen=True, slots=True)
class Summary:
    scenario: str
    policy: str
    driver: str  # live or offline
    duration_s: float
    groups: dict[str, GroupStats]  # "all", "class:x", "tenant:y", "class:x/tenant:y"
    run: dict[str, float | None]
    timeline: list[Window]
    checks: list[tuple[str, float | None, bool]] = field(default_factory=list)
    split: dict[str, EndpointShare] = field(default_factory=dict)
    coverage: dict[str, Coverage] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(ok for _, _, ok in self.checks)

    def metric(
        self, name: str, slo_class: str | None = None, tenant: str | None = None
    ) -> float | None:
        if name in self.run:
            return self.run[name]
        stats = self.groups.get(group_key(slo_class, tenant))
        value = getattr(stats, name, None) if stats is not None else None
        return float(value) if isinstance(value, int | float) else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def group_key(slo_class: str | None, tenant: str | None) -> str:
    parts = [f"class:{slo_class}" if slo_class else "", f"tenant:{tenant}" if tenant else ""]
    return "/".join(p for p in parts if p) or ALL


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the driver knows beyond the records."""

    policy: str
    driver: str
    preemptions: float | None = None


def summarize(scenario: Scenario, records: Sequence[LoadRecord], facts: RunFacts) -> Summary:
    good = {r.request_id for r in records if record_meets_slo(r, scenario.classes[r.slo_class])}
    total_good = len(good)
    prices = scenario.prices()
    groups = {
        key: _group(members, good, total_good, prices, scenario.duration_s)
        for key, members in _grouped(records).items()
    }
    timeline = _timeline(records, good, scenario, scenario.window_s)
    run = {
        "attempts_ratio": _attempts_ratio(records),
        "lateness_p99_s": percentile([r.lateness_s for r in records], 99),
        "preemptions": facts.preemptions,
        "recovery_s": _recovery(timeline, scenario),
        # what a trace's block reuse allows any policy at most, beside `cached_share`
        "cache_bound": scenario.trace.cache_bound() if scenario.trace is not None else None,
    }
    summary = Summary(
        scenario.name, facts.policy, facts.driver, scenario.duration_s, groups, run, timeline,
        split=split(records, prices), coverage=coverage(records),
    )  # fmt: skip
    return _judged(summary, scenario.checks)


def _judged(summary: Summary, checks: Iterable[Check]) -> Summary:
    results = []
    for check in checks:
        observed = summary.metric(check.metric, check.slo_class, check.tenant)
        results.append((check.describe(), observed, check.holds(observed)))
    return Summary(**{**_fields(summary), "checks": results})


def _fields(summary: Summary) -> dict[str, Any]:
    return {name: getattr(summary, name) for name in Summary.__dataclass_fields__}


def _grouped(records: Iterable[LoadRecord]) -> dict[str, list[LoadRecord]]:
    groups: dict[str, list[LoadRecord]] = {ALL: []}
    for r in records:
        for key in (
            ALL,
            group_key(r.slo_class, None),
            group_key(None, r.tenant),
            group_key(r.slo_class, r.tenant),
        ):
            groups.setdefault(key, []).append(r)
    return groups


def _group(
    records: Sequence[LoadRecord],
    good: set[str],
    total_good: int,
    prices: Mapping[str, Price],
    duration_s: float,
) -> GroupStats:
    count = len(records)
    ok = [r for r in records if r.outcome == "ok"]
    shed = sum(1 for r in records if r.outcome == "shed")
    met = sum(1 for r in records if r.request_id in good)
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpot = [r.tpot_s for r in ok if r.tpot_s is not None]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    return GroupStats(
        count=count,
        ok=len(ok),
        shed=shed,
        errors=count - len(ok) - shed,
        admitted=count - shed,
        success_rate=_ratio(len(ok), count),
        shed_rate=_ratio(shed, count),
        error_rate=_ratio(count - len(ok) - shed, count),
        attainment=_ratio(met, count),
        good=met,
        goodput_rps=met / duration_s,
        goodput_share=_ratio(met, total_good),
        cost=sum(record_cost(r, prices) for r in ok),
        cached_share=_ratio(sum(r.cached_tokens for r in ok), sum(r.prompt_tokens for r in ok)),
        ttft_p50_s=percentile(ttft, 50),
        ttft_p95_s=percentile(ttft, 95),
        ttft_p99_s=percentile(ttft, 99),
        tpot_p50_s=percentile(tpot, 50),
        tpot_p95_s=percentile(tpot, 95),
        tpot_p99_s=percentile(tpot, 99),
        e2e_p50_s=percentile(e2e, 50),
        e2e_p99_s=percentile(e2e, 99),
        reasons=dict(Counter(r.reason for r in records if r.outcome != "ok")),
    )


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _attempts_ratio(records: Sequence[LoadRecord]) -> float | None:
    forwarded = [r for r in records if r.attempts > 0]
    return sum(r.attempts for r in forwarded) / len(forwarded) if forwarded else None


def _timeline(
    records: Sequence[LoadRecord], good: set[str], scenario: Scenario, window_s: float
) -> list[Window]:
    count = max(1, math.ceil(scenario.duration_s / window_s))
    buckets: list[list[LoadRecord]] = [[] for _ in range(count)]
    for r in records:
        buckets[min(count - 1, int(r.arrival_s / window_s))].append(r)
    busy = _busy_seconds(records, count, window_s)
    served = [0] * count
    for r in records:
        if r.outcome == "ok":
            served[min(count - 1, int((r.start_s + (r.e2e_s or 0.0)) / window_s))] += 1
    prices = scenario.prices()
    return [
        replace(
            _window(
                index * window_s, members, good, list(scenario.classes), busy[index] / window_s
            ),
            served=served[index],
            cost=sum(record_cost(r, prices) for r in members if r.outcome == "ok"),
            met=sum(r.request_id in good for r in members),
            refused=sum(r.outcome == "shed" for r in members),
            late=sum(r.outcome == "ok" and r.request_id not in good for r in members),
        )
        for index, members in enumerate(buckets)
    ]


def _window(
    start_s: float,
    members: Sequence[LoadRecord],
    good: set[str],
    classes: list[str],
    load: float,
) -> Window:
    ttft = [r.ttft_s for r in members if r.outcome == "ok" and r.ttft_s is not None]
    attainment: dict[str, float | None] = {}
    for name in classes:
        of_class = [r for r in members if r.slo_class == name]
        attainment[name] = (
            _ratio(sum(r.request_id in good for r in of_class), len(of_class)) if of_class else None
        )
    return Window(
        start_s,
        len(members),
        load,
        percentile(ttft, 50),
        percentile(ttft, 95),
        percentile(ttft, 99),
        attainment,
    )


def _busy_seconds(records: Iterable[LoadRecord], count: int, window_s: float) -> list[float]:
    """Request-seconds in flight per window (its mean concurrency times window_s)."""
    busy = [0.0] * count
    for r in records:
        start, end = r.start_s, r.start_s + (r.e2e_s or 0.0)
        first, last = int(start / window_s), min(count - 1, int(end / window_s))
        for index in range(first, last + 1):
            lo, hi = max(start, index * window_s), min(end, (index + 1) * window_s)
            busy[index] += max(0.0, hi - lo)
    return busy


def _recovery(timeline: Sequence[Window], scenario: Scenario) -> float | None:
    since_s = scenario.recovery_from_s
    if since_s is None:
        return None
    for window in timeline:
        if window.start_s + 1e-9 < since_s:
            continue
        scores = [a for a in window.attainment.values() if a is not None]
        if scores and min(scores) >= scenario.recovery_target:
            return window.start_s - since_s
    return None
