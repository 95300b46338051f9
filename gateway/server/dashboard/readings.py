"""What the dashboard reads from a running gateway, and one sample of it for the history ring.

Predictions are what the routing estimator (policies/estimate.py, with the configured policy's
parameters, else the defaults) says now about a typical request on each endpoint: a prompt of
the endpoint's mean prompt length in the window, and the default output length. Observed
quantiles are the store's rolling ones (merged over replicas). Counts of SLO verdicts, sheds,
queued requests and requests by outcome come from this replica's Prometheus counters.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from gateway.core import candidates
from gateway.server.runtime import Runtime
from gateway.telemetry.metrics import Metrics
from policies.base import EndpointSnapshot, RouteRequest, SloTarget
from policies.estimate import EstimateParams, Estimator, Prediction

TYPICAL = SloTarget(name="dashboard")
Key = tuple[str, ...]


def estimator(runtime: Runtime) -> Estimator:
    params = getattr(runtime.config.policy, "estimate", None)
    return Estimator(params if isinstance(params, EstimateParams) else EstimateParams())


def snapshot(runtime: Runtime, endpoint_id: str) -> EndpointSnapshot:
    """Like the router's snapshots, but for every endpoint, in rotation or not."""
    stats = runtime.view.stats(endpoint_id)
    endpoint, view = runtime.registry.endpoints[endpoint_id], runtime.view
    return candidates.snapshot(
        endpoint,
        stats.in_flight,
        view.local_tokens,
        runtime.scraper.signals,
        stats,
        view.local_prefill,
    )


def typical_request(runtime: Runtime, model: Estimator, endpoint_id: str) -> RouteRequest:
    latency = runtime.view.stats(endpoint_id).latency
    prompt_tokens = latency.prompt_tokens_mean or model.params.mean_prompt_tokens
    public_model = next(iter(runtime.registry.endpoints[endpoint_id].models))
    return RouteRequest("dashboard", public_model, "", TYPICAL, round(prompt_tokens))


def predict(runtime: Runtime, model: Estimator, endpoint_id: str) -> Prediction:
    request = typical_request(runtime, model, endpoint_id)
    return model.predict(request, snapshot(runtime, endpoint_id))


@dataclass(frozen=True, slots=True)
class Totals:
    """Running totals of this replica's counters since it started."""

    slo: Mapping[Key, float]  # (class, tenant, met|missed)
    shed: Mapping[Key, float]  # (class, tenant, reason)
    queued: Mapping[Key, float]  # (class,)
    outcomes: Mapping[Key, float] = field(default_factory=dict)  # (class, tenant, outcome)
    cost: Mapping[Key, float] = field(default_factory=dict)  # (tenant,) USD at endpoint prices
    tokens: Mapping[Key, float] = field(default_factory=dict)  # (tenant, prompt|cached|completion)
    fair_waits: Mapping[Key, float] = field(default_factory=dict)  # (class, tenant)
    missed: Mapping[Key, float] = field(default_factory=dict)  # (class, tenant, target)

    def minus(self, earlier: Totals) -> Totals:
        return Totals(
            _minus(self.slo, earlier.slo),
            _minus(self.shed, earlier.shed),
            _minus(self.queued, earlier.queued),
            _minus(self.outcomes, earlier.outcomes),
            _minus(self.cost, earlier.cost),
            _minus(self.tokens, earlier.tokens),
            _minus(self.fair_waits, earlier.fair_waits),
            _minus(self.missed, earlier.missed),
        )


def _minus(now: Mapping[Key, float], earlier: Mapping[Key, float]) -> dict[Key, float]:
    return {key: value - earlier.get(key, 0.0) for key, value in now.items()}


def totals(metrics: Metrics) -> Totals:
    metrics.usage.flush()
    return Totals(
        _counts(metrics.slo, ("slo_class", "tenant", "result")),
        _counts(metrics.shed, ("slo_class", "tenant", "reason")),
        _counts(metrics.queued, ("slo_class",)),
        _counts(metrics.requests, ("slo_class", "tenant", "outcome")),
        _counts(metrics.usage_cost, ("tenant",)),
        _counts(metrics.usage_tokens, ("tenant", "kind")),
        _counts(metrics.fair_waits, ("slo_class", "tenant")),
        _counts(metrics.slo_missed, ("slo_class", "tenant", "target")),
    )


def endpoint_coverage(metrics: Metrics) -> dict[str, dict[str, float | None]]:
    """Per endpoint, of this replica's attempts since it started: the share whose TTFT and TPOT
    came within the p95s predicted for them (None: none judged), and how many were judged."""
    counts = _counts(metrics.coverage, ("endpoint", "signal", "result"))
    found: dict[str, dict[str, float | None]] = {}
    for endpoint_id in {key[0] for key in counts}:
        entry: dict[str, float | None] = {}
        for signal in ("ttft", "tpot"):
            within = counts.get((endpoint_id, signal, "within"), 0.0)
            judged = within + counts.get((endpoint_id, signal, "beyond"), 0.0)
            entry[signal] = within / judged if judged else None
            entry[f"{signal}_n"] = judged
        found[endpoint_id] = entry
    return found


def _counts(counter: Counter, labels: tuple[str, ...]) -> dict[Key, float]:
    """Sum a counter's `_total` samples by `labels` (other labels are added up)."""
    counts: dict[Key, float] = {}
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                key = tuple(sample.labels[name] for name in labels)
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def gauge_value(gauge: Gauge) -> float:
    return sum(s.value for family in gauge.collect() for s in family.samples)


@dataclass(frozen=True, slots=True)
class Point:
    """One endpoint at one sample; None where nothing is known."""

    ttft_p95_s: float | None
    predicted_ttft_p95_s: float
    tpot_p95_s: float | None
    predicted_tpot_p95_s: float
    in_flight: int
    waiting: float | None
    kv_usage: float | None


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float
    points: Mapping[str, Point]
    totals: Totals


SERIES = tuple(Point.__dataclass_fields__)


def point(runtime: Runtime, model: Estimator, endpoint_id: str) -> Point:
    stats = runtime.view.stats(endpoint_id)
    engine = runtime.scraper.signals(endpoint_id)
    predicted = predict(runtime, model, endpoint_id)
    return Point(
        ttft_p95_s=stats.latency.ttft_p95_s,
        predicted_ttft_p95_s=predicted.ttft_p95_s,
        tpot_p95_s=stats.latency.tpot_p95_s,
        predicted_tpot_p95_s=predicted.tpot_p95_s,
        in_flight=stats.in_flight,
        waiting=engine.waiting if engine else None,
        kv_usage=engine.kv_usage if engine else None,
    )


def sample(runtime: Runtime) -> Sample:
    model = estimator(runtime)
    points = {eid: point(runtime, model, eid) for eid in runtime.registry.endpoints}
    return Sample(time.time(), points, totals(runtime.metrics))
