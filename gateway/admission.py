"""Applies admission before routing: tenant limits, saturation, shedding, the deadline queue.

The decisions are pure (`policies/admission.py`); this module holds what they need across
requests: each endpoint's previous saturation (for hysteresis), the deadline queue and its
dispatcher task, and the tenant counters, which live in the stats store so that a limit is exact
across replicas (atomic check-and-add; N concurrent requests against a limit of k admit k).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gateway.background import Background
from gateway.errors import Rejected
from gateway.settings import TenantLimits
from gateway.stats.base import StatsStore, TenantQuota
from gateway.telemetry import Metrics
from policies.admission import (
    AdmissionParams,
    Admit,
    DeadlineQueue,
    Reason,
    Reject,
    Saturation,
    decide,
    has_headroom,
    next_saturations,
    request_states,
    with_headroom,
)
from policies.base import EndpointSnapshot, RouteRequest

TENANT_WINDOW_S = 60.0
DISPATCH_TICK_S = 0.02
DISPATCH_PER_TICK = 4  # engine gauges lag: pace dispatches so one tick cannot flood an endpoint

Snapshots = Callable[[], Sequence[EndpointSnapshot]]
TENANT_RETRY_AFTER_S = TENANT_WINDOW_S / 6  # a tenant window moves on in slots of this size
TENANT_REASONS = {
    "requests": Reason.TENANT_RATE_LIMITED,
    "tokens": Reason.TENANT_TOKEN_LIMITED,
    "concurrency": Reason.TENANT_CONCURRENCY_LIMITED,
}
_MESSAGES = {
    Reason.TENANT_RATE_LIMITED: "Your tenant's request rate limit is reached; retry later.",
    Reason.TENANT_TOKEN_LIMITED: "Your tenant's token rate limit is reached; retry later.",
    Reason.TENANT_CONCURRENCY_LIMITED: "Too many concurrent requests for your tenant.",
    Reason.SATURATED: "Every endpoint for this model is saturated; retry later.",
    Reason.RESERVED_FOR_HIGHER_PRIORITY: "Remaining capacity is reserved for higher priority "
    "classes; retry later.",
    Reason.DEADLINE_UNREACHABLE: "The request cannot be served within its SLO deadline.",
    Reason.QUEUE_FULL: "The admission queue is full; retry later.",
}


def rejection(status: int, reason: Reason, retry_after_s: float) -> Rejected:
    return Rejected(_MESSAGES[reason], status=status, reason=reason, retry_after_s=retry_after_s)


@dataclass(eq=False)
class _Waiter:
    route: RouteRequest
    snapshots: Snapshots
    done: asyncio.Future[None] = field(default_factory=asyncio.Future)


class Admission:
    def __init__(
        self,
        params: AdmissionParams,
        limits: Mapping[str, TenantLimits],
        store: StatsStore,
        metrics: Metrics,
        background: Background,
        lease_ttl_s: float,
    ) -> None:
        self.params = params
        self.limits = limits
        self.store = store
        self.metrics = metrics
        self.background = background
        self.lease_ttl_s = lease_ttl_s
        self.states: dict[str, Saturation] = {}
        self._queue: DeadlineQueue[_Waiter] = DeadlineQueue(params.queue_max_size)
        self._queued: Counter[str] = Counter()  # waiting requests per model
        self._wake = asyncio.Event()
        self._largest_pool_tokens: int | None = None  # the largest engine KV pool scraped

    def reconfigure(self, params: AdmissionParams, limits: Mapping[str, TenantLimits]) -> None:
        """New parameters for new decisions; the queue keeps its waiters."""
        self.params = params
        self.limits = limits
        self._queue.max_size = params.queue_max_size

    def saturation(self, snapshots: Sequence[EndpointSnapshot]) -> dict[str, Saturation]:
        states = next_saturations(self.states, snapshots, self.params)
        self.states.update(states)
        pools = [s.engine.kv_capacity_tokens for s in snapshots if s.engine is not None]
        if any(pools):
            self._largest_pool_tokens = max(pool or 0 for pool in pools)
        return states

    async def admit(
        self, route: RouteRequest, current: Sequence[EndpointSnapshot], snapshots: Snapshots
    ) -> list[EndpointSnapshot]:
        """The candidates this request may use now (`current`); waits in the deadline queue
        if it must, then takes fresh `snapshots()`."""
        states = self._states_for(route, current)
        decision = decide(
            route.slo,
            states.values(),
            self.params,
            now_s=time.time(),
            queued=self._queued[route.model],
        )
        if isinstance(decision, Reject):
            raise self._shed(route, decision.status, decision.reason, decision.retry_after_s)
        if not isinstance(decision, Admit):
            current = await self._wait(route, decision.deadline_s, snapshots)
            states = self._states_for(route, current)
        eligible = with_headroom(current, states, route.slo, self.params)
        return eligible or list(current)

    def footprint(self, route: RouteRequest) -> int:
        """KV tokens the request will hold at most: its prompt plus its output.

        A request larger than every KV pool can never be served (vLLM's max_model_len fits in
        its pool), so its endpoint refuses it with a 400 at once: it holds nothing, and must
        not wait in the queue for room that never comes.
        """
        tokens = route.prompt_tokens + (route.max_tokens or self.params.default_output_tokens)
        largest = self._largest_pool_tokens
        return 0 if largest is not None and tokens > largest else tokens

    def _states_for(
        self, route: RouteRequest, snapshots: Sequence[EndpointSnapshot]
    ) -> dict[str, Saturation]:
        states = self.saturation(snapshots)
        return request_states(states, snapshots, self.footprint(route), self.params)

    def _shed(self, route: RouteRequest, status: int, reason: Reason, retry_s: float) -> Rejected:
        self.metrics.shed.labels(route.slo.name, route.tenant, reason.value).inc()
        return rejection(status, reason, retry_s)

    async def _wait(
        self, route: RouteRequest, deadline_s: float, snapshots: Snapshots
    ) -> Sequence[EndpointSnapshot]:
        waiter = _Waiter(route, snapshots)
        if not self._queue.push(waiter, deadline_s):
            raise self._shed(route, 503, Reason.QUEUE_FULL, self.params.retry_after_s)
        self._queued[route.model] += 1
        self.metrics.queued.labels(route.slo.name).inc()
        self.metrics.queue_depth.set(len(self._queue))
        self._wake.set()
        try:
            await waiter.done
        finally:
            self._queue.remove(waiter)
            self._queued[route.model] -= 1
            self.metrics.queue_depth.set(len(self._queue))
        return snapshots()

    async def run(self) -> None:
        """The dispatcher, owned by the app lifespan: expire, then dispatch by deadline."""
        while True:
            if not len(self._queue):
                self._wake.clear()
                await self._wake.wait()
            self._dispatch(time.time())
            await asyncio.sleep(DISPATCH_TICK_S)

    def _dispatch(self, now: float) -> None:
        for expired in self._queue.drop_expired(now):
            error = self._shed(expired.route, 503, Reason.DEADLINE_UNREACHABLE, 1.0)
            if not expired.done.done():
                expired.done.set_exception(error)
        for _ in range(DISPATCH_PER_TICK):
            waiter = self._queue.pop(now, fits=self._fits)
            if waiter is None:
                return
            if not waiter.done.done():
                waiter.done.set_result(None)

    def _fits(self, waiter: _Waiter) -> bool:
        states = self._states_for(waiter.route, waiter.snapshots())
        return any(has_headroom(s, waiter.route.slo, self.params) for s in states.values())

    async def admit_tenant(self, route: RouteRequest) -> None:
        """Every limit of the tenant in one atomic call to the shared store (one round trip)."""
        limits = self.limits.get(route.tenant)
        if limits is None or not (
            limits.requests_per_min or limits.tokens_per_min or limits.max_concurrent
        ):
            return
        quota = TenantQuota(
            limits.requests_per_min, limits.tokens_per_min, limits.max_concurrent, TENANT_WINDOW_S
        )
        verdict = await self.store.admit_tenant(
            route.tenant,
            route.request_id,
            tokens=route.prompt_tokens + (route.max_tokens or 0),
            quota=quota,
            ttl_s=self.lease_ttl_s,
            now=time.time(),
        )
        if verdict != "admitted":
            raise self._shed(route, 429, TENANT_REASONS[verdict], TENANT_RETRY_AFTER_S)

    def finished(self, route: RouteRequest) -> None:
        """Give back the tenant's concurrency slot (a no-op for tenants without one)."""
        limits = self.limits.get(route.tenant)
        if limits is not None and limits.max_concurrent:
            release = self.store.release_tenant(route.tenant, route.request_id, now=time.time())
            self.background.spawn(release)
