"""What happens around each upstream attempt: leases, health, statistics, SLO accounting.

Nothing here awaits on the request path: lease changes, breaker updates and statistics go to
background tasks so a slow store never delays a response.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.background import Background
from gateway.health import HealthChecker
from gateway.leases import LeaseBook
from gateway.proxy import AttemptFailed, Opened
from gateway.record import note_result
from gateway.registry import Registry
from gateway.signals import parse_rate_limits
from gateway.sse import StreamWatch
from gateway.state import SharedView
from gateway.stats.base import LatencySample, StatsStore
from gateway.telemetry import Metrics
from policies.base import RouteRequest, SloTarget


@dataclass(frozen=True, slots=True)
class Finished:
    """The observed result of one request on one endpoint."""

    outcome: str  # ok, upstream_error, cancelled, client_error
    status: int
    prompt_tokens: int
    output_tokens: int
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float


def slo_met(slo: SloTarget, result: Finished) -> bool:
    """Succeeded and met every target of its class. Without a streamed first token, the whole
    answer's time stands in for TTFT (an upper bound)."""
    if result.outcome != "ok":
        return False
    ttft_s = result.ttft_s if result.ttft_s is not None else result.e2e_s
    if slo.ttft_s is not None and ttft_s > slo.ttft_s:
        return False
    if slo.tpot_s is not None and result.tpot_s is not None and result.tpot_s > slo.tpot_s:
        return False
    return slo.deadline_s is None or result.e2e_s <= slo.deadline_s


class Finisher:
    def __init__(
        self,
        leases: LeaseBook,
        registry: Registry,
        health: HealthChecker,
        view: SharedView,
        metrics: Metrics,
        background: Background,
    ) -> None:
        self.leases = leases
        self.registry = registry
        self.health = health
        self.view = view
        self.metrics = metrics
        self.background = background
        self.store: StatsStore = view.store
        self.on_finished: Callable[[RouteRequest], None] = lambda request: None

    def start(self, endpoint_id: str, request_id: str, tokens: int) -> None:
        self.leases.take(endpoint_id, request_id, tokens)

    def abandoned(self, endpoint_id: str, request_id: str) -> None:
        self.leases.drop(endpoint_id, request_id)

    def failed_attempt(
        self, endpoint_id: str, request: RouteRequest, failure: AttemptFailed
    ) -> None:
        self.leases.drop(endpoint_id, request.request_id)
        now = time.time()
        if failure.quota_exhausted and failure.retry_after_s:
            self._cool_down(endpoint_id, now + failure.retry_after_s, "insufficient_quota")
        elif failure.retry_after_s:
            self._cool_down(endpoint_id, now + failure.retry_after_s, "retry_after")
        if failure.status != 429:  # rate limits cool an endpoint down; they do not break it
            self._record_health(endpoint_id, ok=False)
        result = "rate_limited" if failure.status == 429 else "failed"
        self.metrics.upstream_attempts.labels(endpoint_id, result).inc()
        sample = LatencySample(
            now, False, failure.status, request.prompt_tokens, 0, None, None, 0.0
        )
        self.background.spawn(self.store.observe(endpoint_id, sample))

    def finish(self, opened: Opened, request: RouteRequest, result: Finished) -> None:
        """Account for a request that got an upstream response (closing it in the background)."""
        note_result(result)
        endpoint_id = opened.endpoint.id
        self.background.spawn(opened.response.aclose())
        in_flight = self.leases.in_flight_when_taken(endpoint_id, request.request_id)
        self.leases.drop(endpoint_id, request.request_id)
        self.on_finished(request)
        if result.outcome != "cancelled":
            self._record_health(endpoint_id, ok=result.outcome != "upstream_error")
        self.metrics.upstream_attempts.labels(endpoint_id, result.outcome).inc()
        self.metrics.requests.labels(
            request.model, endpoint_id, request.tenant, request.slo.name, result.outcome
        ).inc()
        self._observe_latency(endpoint_id, request, result)
        if opened.endpoint.kind == "openai":
            self._honour_rate_limits(endpoint_id, opened)
        if result.outcome == "cancelled":
            return  # a client leaving says nothing about the endpoint or the SLO
        verdict = "met" if slo_met(request.slo, result) else "missed"
        self.metrics.slo.labels(request.slo.name, request.tenant, endpoint_id, verdict).inc()
        sample = LatencySample(
            at_s=time.time(),
            ok=result.outcome != "upstream_error",
            status=result.status,
            prompt_tokens=result.prompt_tokens,
            output_tokens=result.output_tokens,
            ttft_s=result.ttft_s,
            tpot_s=result.tpot_s,
            e2e_s=result.e2e_s,
            in_flight=in_flight,
        )
        self.background.spawn(self.store.observe(endpoint_id, sample))

    def _observe_latency(self, endpoint_id: str, request: RouteRequest, result: Finished) -> None:
        if result.ttft_s is not None:
            self.metrics.ttft.labels(endpoint_id, request.model).observe(result.ttft_s)
        if result.tpot_s is not None:
            self.metrics.tpot.labels(endpoint_id, request.model).observe(result.tpot_s)

    def _record_health(self, endpoint_id: str, *, ok: bool) -> None:
        if ok and not self.view.stats(endpoint_id).breaker.failures:
            return  # the common case: nothing to reset, so no write to the shared store
        self.background.spawn(self.health.record(endpoint_id, ok=ok, now=time.time()))

    def _honour_rate_limits(self, endpoint_id: str, opened: Opened) -> None:
        """A provider that says its budget is spent is left alone until the budget resets."""
        now = time.time()
        wait_s = parse_rate_limits(opened.response.headers, now=now).exhausted_for_s()
        if wait_s:
            self._cool_down(endpoint_id, now + wait_s, "rate_limit_exhausted")

    def _cool_down(self, endpoint_id: str, until_s: float, reason: str) -> None:
        self.registry.cool_down(endpoint_id, until_s, reason)
        now = time.time()
        self.background.spawn(self.store.cool_down(endpoint_id, until_s=until_s, now=now))


def stream_result(opened: Opened, watch: StreamWatch, outcome: str, prompt: int) -> Finished:
    usage = watch.usage or {}
    return Finished(
        outcome=outcome,
        status=opened.status,
        prompt_tokens=_int(usage.get("prompt_tokens"), prompt),
        output_tokens=watch.output_tokens,
        ttft_s=watch.ttft_s,
        tpot_s=watch.tpot_s,
        e2e_s=time.perf_counter() - opened.started_s,
    )


def body_result(opened: Opened, prompt: int) -> Finished:
    """A non-streamed response: no TTFT; tokens from `usage` when the body carries it."""
    usage: dict[str, object] = {}
    if b'"usage"' in opened.first:
        try:
            parsed = json.loads(opened.first)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("usage"), dict):
            usage = parsed["usage"]
    status = opened.status
    return Finished(
        outcome="ok" if status < 300 else "client_error",
        status=status,
        prompt_tokens=_int(usage.get("prompt_tokens"), prompt),
        output_tokens=_int(usage.get("completion_tokens"), 0),
        ttft_s=None,
        tpot_s=None,
        e2e_s=time.perf_counter() - opened.started_s,
    )


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) else default
