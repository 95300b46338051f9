"""What happens around each upstream attempt: leases, health, statistics, SLO accounting.

Nothing here awaits on the request path: lease changes, breaker updates and statistics go to
background tasks, or run at once where they cannot suspend (the memory store, the Redis
write-behind's queue), so a slow store never delays a response. The decisions (`Outcomes`) take
`now` and a `spawn` for store writes, so the offline simulator runs them in virtual time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import orjson

from gateway.core.rate_limits import parse_rate_limits
from gateway.errors import AttemptFailed
from gateway.state.background import Background, Spawn, run_now
from gateway.state.leases import LeaseBook
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.resilient import writes_at_once
from gateway.state.store import LatencySample, StatsStore
from gateway.state.view import SharedView
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.record import note_result
from gateway.upstream.client import Opened
from gateway.upstream.sse import StreamWatch
from gateway.watch.endpoints import Registry
from gateway.watch.health import Breakers, HealthChecker
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


class Leases(Protocol):
    """This replica's leases: `LeaseBook` live, `LocalLeases` plus inline store calls offline."""

    def take(self, endpoint_id: str, request_id: str, tokens: int) -> object: ...

    def drop(self, endpoint_id: str, request_id: str) -> object: ...

    def in_flight_when_taken(self, endpoint_id: str, request_id: str) -> int: ...


class Outcomes:
    """What each attempt's end does to state: leases, cool-downs, breakers, statistics.

    Synchronous, with `now` passed in; store writes go to `spawn` (background tasks live, run at
    once offline over a store that never suspends), so the live `Finisher` and the offline
    simulator account for attempts with this same code.
    """

    def __init__(
        self,
        leases: Leases,
        registry: Registry,
        breakers: Breakers,
        view: SharedView,
        spawn: Spawn,
        *,
        observe: Spawn | None = None,
    ) -> None:
        """`observe`: where observations go, when not to `spawn` (see `Finisher`)."""
        self.leases = leases
        self.registry = registry
        self.breakers = breakers
        self.view = view
        self.store: StatsStore = view.store
        self.spawn = spawn
        self.observe = observe or spawn
        self.on_finished: Callable[[RouteRequest, float], None] = lambda request, now: None

    def failed_attempt(
        self, endpoint_id: str, request: RouteRequest, failure: AttemptFailed, now: float
    ) -> None:
        """An attempt that got no usable answer before the first byte."""
        self.leases.drop(endpoint_id, request.request_id)
        if failure.quota_exhausted and failure.retry_after_s:
            self.cool_down(endpoint_id, now + failure.retry_after_s, "insufficient_quota", now)
        elif failure.retry_after_s:
            self.cool_down(endpoint_id, now + failure.retry_after_s, "retry_after", now)
        if failure.status != 429:  # rate limits cool an endpoint down; they do not break it
            self._record_health(endpoint_id, ok=False, now=now)
        sample = LatencySample(
            now, False, failure.status, request.prompt_tokens, 0, None, None, 0.0
        )
        self.observe(self.store.observe(endpoint_id, sample))

    def finished(
        self,
        endpoint_id: str,
        request: RouteRequest,
        result: Finished,
        limit_headers: Mapping[str, str] | None,
        now: float,
    ) -> bool | None:
        """A request that got an answer; `limit_headers`: a provider's rate-limit headers.
        Whether it met its SLO; None when the client left (which says nothing about either)."""
        in_flight = self.leases.in_flight_when_taken(endpoint_id, request.request_id)
        self.leases.drop(endpoint_id, request.request_id)
        self.on_finished(request, now)
        if result.outcome != "cancelled":
            self._record_health(endpoint_id, ok=result.outcome != "upstream_error", now=now)
        if limit_headers is not None:
            self._honour_rate_limits(endpoint_id, limit_headers, now)
        if result.outcome == "cancelled":
            return None
        sample = LatencySample(
            at_s=now,
            ok=result.outcome != "upstream_error",
            status=result.status,
            prompt_tokens=result.prompt_tokens,
            output_tokens=result.output_tokens,
            ttft_s=result.ttft_s,
            tpot_s=result.tpot_s,
            e2e_s=result.e2e_s,
            in_flight=in_flight,
        )
        self.observe(self.store.observe(endpoint_id, sample))
        return slo_met(request.slo, result)

    def _record_health(self, endpoint_id: str, *, ok: bool, now: float) -> None:
        if ok and not self.view.stats(endpoint_id).breaker.failures:
            return  # the common case: nothing to reset, so no write to the shared store
        self.spawn(self.breakers.record(endpoint_id, ok=ok, now=now))

    def _honour_rate_limits(self, endpoint_id: str, headers: Mapping[str, str], now: float) -> None:
        """A provider that says its budget is spent is left alone until the budget resets."""
        wait_s = parse_rate_limits(headers, now=now).exhausted_for_s()
        if wait_s:
            self.cool_down(endpoint_id, now + wait_s, "rate_limit_exhausted", now)

    def cool_down(self, endpoint_id: str, until_s: float, reason: str, now: float) -> None:
        self.registry.cool_down(endpoint_id, until_s, reason)
        self.spawn(self.store.cool_down(endpoint_id, until_s=until_s, now=now))


class Finisher:
    """The live request path's accounting: `Outcomes` on the wall clock, plus metrics."""

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
        self.metrics = metrics
        self.background = background
        # Over the memory store every write finishes at once, so none needs a task; over Redis
        # observations do (the write-behind queues them), breaker and cool-down writes do not.
        at_once = writes_at_once(view.store)
        memory = isinstance(view.store, MemoryStatsStore)
        spawn = run_now if memory else background.spawn
        observe = run_now if at_once else background.spawn
        self.outcomes = Outcomes(leases, registry, health.breakers, view, spawn, observe=observe)
        self.outcomes.on_finished = lambda request, now: self.on_finished(request)
        self.on_finished: Callable[[RouteRequest], None] = lambda request: None

    def start(self, endpoint_id: str, request_id: str, tokens: int) -> None:
        self.leases.take(endpoint_id, request_id, tokens)

    def abandoned(self, endpoint_id: str, request_id: str) -> None:
        self.leases.drop(endpoint_id, request_id)

    def failed_attempt(
        self, endpoint_id: str, request: RouteRequest, failure: AttemptFailed
    ) -> None:
        self.outcomes.failed_attempt(endpoint_id, request, failure, time.time())
        result = "rate_limited" if failure.status == 429 else "failed"
        self.metrics.upstream_attempts.labels(endpoint_id, result).inc()

    def finish(self, opened: Opened, request: RouteRequest, result: Finished) -> None:
        """Account for a request that got an upstream response (closing it in the background)."""
        note_result(result)
        endpoint_id = opened.endpoint.id
        run_now(opened.response.aclose())  # aiohttp's release(), which never suspends
        limits = opened.response.headers if opened.endpoint.kind == "openai" else None
        met = self.outcomes.finished(endpoint_id, request, result, limits, time.time())
        self.metrics.upstream_attempts.labels(endpoint_id, result.outcome).inc()
        self.metrics.requests.labels(
            request.model, endpoint_id, request.tenant, request.slo.name, result.outcome
        ).inc()
        self._observe_latency(endpoint_id, request, result)
        if met is not None:
            verdict = "met" if met else "missed"
            self.metrics.slo.labels(request.slo.name, request.tenant, endpoint_id, verdict).inc()

    def _observe_latency(self, endpoint_id: str, request: RouteRequest, result: Finished) -> None:
        if result.ttft_s is not None:
            self.metrics.ttft.labels(endpoint_id, request.model).observe(result.ttft_s)
        if result.tpot_s is not None:
            self.metrics.tpot.labels(endpoint_id, request.model).observe(result.tpot_s)


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
        # orjson, 4-6x faster than `json` on a whole answer: only `usage`'s integers are read,
        # and an integer beyond 64 bits (a float to orjson) fails the isinstance check below.
        try:
            parsed = orjson.loads(opened.first)
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
