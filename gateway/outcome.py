"""What happens around each upstream attempt: leases, health, statistics and metrics.

Only the lease acquire is awaited on the request path; releases and statistics updates go to
background tasks so a slow store never delays a response.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from gateway.background import Background
from gateway.proxy import AttemptFailed, Opened
from gateway.registry import Registry
from gateway.sse import StreamWatch
from gateway.stats.base import LatencySample, StatsStore
from gateway.telemetry import Metrics
from policies.base import RouteRequest


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


class Finisher:
    def __init__(
        self,
        registry: Registry,
        store: StatsStore,
        metrics: Metrics,
        background: Background,
        lease_ttl_s: float,
    ) -> None:
        self.lease_ttl_s = lease_ttl_s  # outlives any sane request; a dead replica's leases expire
        self.registry = registry
        self.store = store
        self.metrics = metrics
        self.background = background

    async def start(self, endpoint_id: str, request_id: str) -> None:
        await self.store.acquire(endpoint_id, request_id, ttl_s=self.lease_ttl_s, now=time.time())
        self.metrics.in_flight.labels(endpoint_id).inc()

    def abandoned(self, endpoint_id: str, request_id: str) -> None:
        self._release(endpoint_id, request_id)

    def failed_attempt(
        self, endpoint_id: str, request_id: str, request: RouteRequest, failure: AttemptFailed
    ) -> None:
        self._release(endpoint_id, request_id)
        self.registry.record_failure(
            endpoint_id,
            time.time(),
            retry_after_s=failure.retry_after_s,
            quota_exhausted=failure.quota_exhausted,
        )
        result = "rate_limited" if failure.status == 429 else "failed"
        self.metrics.upstream_attempts.labels(endpoint_id, result).inc()
        sample = LatencySample(
            at_s=time.time(),
            ok=False,
            status=failure.status,
            prompt_tokens=request.prompt_tokens,
            output_tokens=0,
            ttft_s=None,
            tpot_s=None,
            e2e_s=0.0,
        )
        self.background.spawn(self.store.observe(endpoint_id, sample))

    def finish(self, opened: Opened, request: RouteRequest, result: Finished) -> None:
        """Account for a request that got an upstream response (closing it in the background)."""
        endpoint_id = opened.endpoint.id
        self.background.spawn(opened.response.aclose())
        self._release(endpoint_id, request.request_id)
        if result.outcome == "upstream_error":
            self.registry.record_failure(endpoint_id, time.time())
        elif result.outcome in ("ok", "client_error"):
            self.registry.record_success(endpoint_id)
        self.metrics.upstream_attempts.labels(endpoint_id, result.outcome).inc()
        self.metrics.requests.labels(
            request.model, endpoint_id, request.tenant, request.slo.name, result.outcome
        ).inc()
        self._observe_latency(endpoint_id, request.model, result)
        if result.outcome == "cancelled":
            return  # a client leaving says nothing about the endpoint's speed
        sample = LatencySample(
            at_s=time.time(),
            ok=result.outcome != "upstream_error",
            status=result.status,
            prompt_tokens=result.prompt_tokens,
            output_tokens=result.output_tokens,
            ttft_s=result.ttft_s,
            tpot_s=result.tpot_s,
            e2e_s=result.e2e_s,
        )
        self.background.spawn(self.store.observe(endpoint_id, sample))

    def _observe_latency(self, endpoint_id: str, model: str, result: Finished) -> None:
        if result.ttft_s is not None:
            self.metrics.ttft.labels(endpoint_id, model).observe(result.ttft_s)
        if result.tpot_s is not None:
            self.metrics.tpot.labels(endpoint_id, model).observe(result.tpot_s)

    def _release(self, endpoint_id: str, request_id: str) -> None:
        self.metrics.in_flight.labels(endpoint_id).dec()
        self.background.spawn(self.store.release(endpoint_id, request_id, now=time.time()))


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
