"""Prometheus metrics (base units, `slo_gateway_` prefix) and the gateway's logger.

Labels never carry secrets: endpoint ids, public model names, tenant names and class names only.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Literal, Self

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import Counter as _Counter
from prometheus_client import Gauge as _Gauge
from prometheus_client import Histogram as _Histogram
from prometheus_client.metrics import MetricWrapperBase

from gateway.telemetry.record import RequestRecord
from gateway.telemetry.usage_counters import UsageCounters

log = logging.getLogger("slo_gateway")

LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
TPOT_BUCKETS_S = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0)
DECISION_BUCKETS_S = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2)


class _RememberedLabels(MetricWrapperBase):
    """`labels(...)` through a dict: prometheus_client validates, stringifies and locks on every
    call (several per request); the children it returns live as long as the metric, since the
    gateway never removes a label set. Mixed in before the metric class."""

    def labels(self, *labelvalues: object, **labelkwargs: object) -> Self:
        if labelkwargs:
            return super().labels(*labelvalues, **labelkwargs)
        children: dict[tuple[object, ...], Self] = self.__dict__.setdefault(
            "_children_by_values", {}
        )
        child = children.get(labelvalues)
        if child is None:
            child = children[labelvalues] = super().labels(*labelvalues)
        return child


class Counter(_RememberedLabels, _Counter):
    pass


class Gauge(_RememberedLabels, _Gauge):
    """Under `serve --workers N` (multiprocess mode, gateway/server/workers.py) a gauge reads as
    the most recent value any live worker set, unless it says otherwise (in-flight: summed)."""

    def __init__(
        self,
        *args: Any,
        multiprocess_mode: Literal["livesum", "livemostrecent"] = "livemostrecent",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, multiprocess_mode=multiprocess_mode, **kwargs)  # type: ignore[misc]


class Histogram(_RememberedLabels, _Histogram):
    pass


def exposition(registry: CollectorRegistry) -> bytes:
    """The Prometheus text of `registry`, or under `serve --workers N` of every worker's
    metrics merged (prometheus_client's multiprocess mode: each worker writes its values to
    files in PROMETHEUS_MULTIPROC_DIR, and any worker's scrape reads them all)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return generate_latest(registry)
    from prometheus_client import multiprocess

    merged = CollectorRegistry()
    multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
    return generate_latest(merged)


class Metrics:
    """One set of collectors per app, on its own registry (several apps may share a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests(self.registry)
        self._admission(self.registry)
        self._endpoints(self.registry)
        self._usage(self.registry)

    def count_request(self, record: RequestRecord, outcome: str) -> None:
        """One API request at its end. Labels only from what the gateway chose or checked: the
        model once routed (never a name a client made up), "" for what is unknown."""
        route = record.route
        self.requests.labels(
            route.model if route else "",
            record.endpoint_id or "",
            record.tenant or "",
            route.slo.name if route else "",
            outcome,
            (record.error_code or "") if outcome == "rejected" else "",
        ).inc()

    def _requests(self, r: CollectorRegistry) -> None:
        self.requests = Counter(
            "slo_gateway_requests",
            "Every API request by outcome (ok, client_error, rejected, upstream_error, "
            "cancelled, error); reason: the refusal's code when rejected.",
            ["model", "endpoint", "tenant", "slo_class", "outcome", "reason"],
            registry=r,
        )
        self.upstream_attempts = Counter(
            "slo_gateway_upstream_attempts",
            "Upstream attempts by endpoint and result (ok, retryable, failed, dropped).",
            ["endpoint", "result"],
            registry=r,
        )
        self.ttft = Histogram(
            "slo_gateway_ttft_seconds",
            "Time to first content token, measured at the gateway.",
            ["endpoint", "model"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.tpot = Histogram(
            "slo_gateway_tpot_seconds",
            "Time per output token after the first, measured at the gateway.",
            ["endpoint", "model"],
            buckets=TPOT_BUCKETS_S,
            registry=r,
        )
        self.in_flight = Gauge(
            "slo_gateway_in_flight",
            "Requests this replica has in flight per endpoint.",
            ["endpoint"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.decision = Histogram(
            "slo_gateway_decision_seconds",
            "Time to build snapshots, admit and rank (excludes forwarding).",
            buckets=DECISION_BUCKETS_S,
            registry=r,
        )

    def _usage(self, r: CollectorRegistry) -> None:
        usage = ["tenant", "slo_class", "model", "endpoint"]
        self.usage_requests = Counter(
            "slo_gateway_usage_requests",
            "Requests an upstream answered, accounted to tenant, class, public model, endpoint.",
            usage,
            registry=r,
        )
        self.usage_tokens = Counter(
            "slo_gateway_usage_tokens",
            "Tokens used (kind: prompt, cached (part of prompt), completion), as reported by "
            "the upstream, else counted.",
            [*usage, "kind"],
            registry=r,
        )
        self.usage_cost = Counter(
            "slo_gateway_usage_cost_usd",
            "Cost at the endpoint's prices (USD; cached prompt tokens at the cached rate).",
            usage,
            registry=r,
        )
        self.usage = UsageCounters(self.usage_requests, self.usage_tokens, self.usage_cost)
        self.budget_alerts = Counter(
            "slo_gateway_budget_alerts",
            "Soft budget alerts raised (once per tenant and UTC day or month).",
            ["tenant", "window"],
            registry=r,
        )

    def _admission(self, r: CollectorRegistry) -> None:
        self.slo = Counter(
            "slo_gateway_slo",
            "Finished requests judged against their class's targets (result: met or missed).",
            ["slo_class", "tenant", "endpoint", "result"],
            registry=r,
        )
        self.slo_missed = Counter(
            "slo_gateway_slo_missed",
            "Judged requests that missed, by what missed (target: ttft, tpot, e2e or not_ok;"
            " e2e is the deadline, or a whole answer's budget).",
            ["slo_class", "tenant", "target"],
            registry=r,
        )
        self.coverage = Counter(
            "slo_gateway_p95_coverage",
            "Attempts whose TTFT or TPOT (signal) came within (result: within or beyond) the p95 "
            "the policy predicted for the endpoint: a calibrated p95 covers about 95%.",
            ["endpoint", "slo_class", "signal", "result"],
            registry=r,
        )
        self.fallbacks = Counter(
            "slo_gateway_fallbacks",
            "Requests served by a fallback model (config `fallbacks`, `context_fallbacks`), by "
            "why the model before it could not serve them (reason: unavailable, refused, "
            "context).",
            ["requested", "served", "reason"],
            registry=r,
        )
        self.shed = Counter(
            "slo_gateway_shed",
            "Requests refused by admission, by reason (also x-slo-gateway-reason).",
            ["slo_class", "tenant", "reason"],
            registry=r,
        )
        self.best_effort = Counter(
            "slo_gateway_best_effort",
            "Requests served although no endpoint could meet their SLO even idle (their own "
            "size): decision best_effort (policies/admission.py, By prediction).",
            ["slo_class", "tenant"],
            registry=r,
        )
        self.queued = Counter(
            "slo_gateway_queued",
            "Requests that waited in the deadline queue.",
            ["slo_class"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "slo_gateway_queue_depth",
            "Requests waiting in the deadline queue now.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.queue_wait = Histogram(
            "slo_gateway_queue_wait_seconds",
            "How long requests waited in the deadline queue (dispatched, expired or gone).",
            ["slo_class", "tenant"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.fair_waits = Counter(
            "slo_gateway_fair_waits",
            "Requests that waited while later ones of their class went first by fair share.",
            ["slo_class", "tenant"],
            registry=r,
        )
        self.fair_share = Gauge(
            "slo_gateway_fair_share_tokens",
            "Fairness counter: weighted served tokens of a fairness key in its class, as the "
            "shared store last answered (the least goes first when the class queues).",
            ["slo_class", "fairness_key"],
            registry=r,
        )

    def _endpoints(self, r: CollectorRegistry) -> None:
        self.redis_up = Gauge(
            "slo_gateway_redis_up",
            "1 when shared state is served by Redis, 0 when this replica fell back to memory.",
            registry=r,
        )
        self.engine_kv_usage = Gauge(
            "slo_gateway_engine_kv_usage",
            "Scraped KV-cache usage (0..1) of each engine; absent when stale.",
            ["endpoint"],
            registry=r,
        )
        self.engine_waiting = Gauge(
            "slo_gateway_engine_waiting",
            "Scraped waiting-queue length of each engine; absent when stale.",
            ["endpoint"],
            registry=r,
        )
        self.breaker_open = Gauge(
            "slo_gateway_breaker_open",
            "1 while the endpoint's shared circuit breaker is open or half-open.",
            ["endpoint"],
            registry=r,
        )
        self.config_reloads = Counter(
            "slo_gateway_config_reloads",
            "Config reloads by result (applied, rejected).",
            ["result"],
            registry=r,
        )
        self.endpoint_healthy = Gauge(
            "slo_gateway_endpoint_healthy",
            "1 when the endpoint is in rotation, 0 when unhealthy or cooling down.",
            ["endpoint"],
            registry=r,
        )
