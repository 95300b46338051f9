"""The one orchestrator: candidates -> policy.rank -> forward with failover -> observe.

Policies stay pure because this module enforces the invariants around them: it drops endpoints
that are cooling down or out of quota before `rank`, keeps only real candidates from what the
policy returns, turns an empty ranking into one 503, and times the decision.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

from gateway.background import Background
from gateway.errors import (
    GatewayError,
    NoEndpointAvailable,
    Rejected,
    UpstreamError,
    UpstreamTimeout,
)
from gateway.outcome import Finisher
from gateway.proxy import AttemptFailed, Opened, Upstream, UpstreamCall
from gateway.registry import Registry
from gateway.settings import EndpointConfig, GatewayConfig
from gateway.stats.base import EndpointStats, StatsStore
from gateway.telemetry import Metrics
from policies.base import EndpointSnapshot, Ranking, RouteRequest, RoutingPolicy
from policies.registry import build as build_policy

RETRY_BACKOFF_S = 0.1  # wait before retrying the same endpoint when it gave no Retry-After


class ClientGone(Exception):
    """The client disconnected before the first byte; the upstream attempt was cancelled."""


@dataclass(frozen=True, slots=True)
class Routed:
    opened: Opened
    ranking: Ranking
    attempts: int


class Router:
    def __init__(
        self,
        config: GatewayConfig,
        registry: Registry,
        store: StatsStore,
        upstream: Upstream,
        metrics: Metrics,
        background: Background,
    ) -> None:
        self.config = config
        self.registry = registry
        self.store = store
        self.upstream = upstream
        self.metrics = metrics
        self.finisher = Finisher(registry, store, metrics, background, config.server.lease_ttl_s)
        self.policy: RoutingPolicy = build_policy(config.policy)
        self.rng = random.Random()

    async def rank(self, request: RouteRequest) -> Ranking:
        started = time.perf_counter()
        now = time.time()
        candidates = [
            e for e in self.registry.serving(request.model) if self.registry.available(e.id, now)
        ]
        if not candidates:
            raise NoEndpointAvailable(
                f"No endpoint serving {request.model!r} is available right now; retry shortly.",
                code="no_endpoint_available",
                headers={"retry-after": "1"},
            )
        stats = await self.store.read([e.id for e in candidates], now=now)
        snapshots = [self._snapshot(e, stats.get(e.id, EndpointStats())) for e in candidates]
        ranking = self.policy.rank(request, snapshots, self.rng)
        ranking = _only_candidates(ranking, {e.id for e in candidates})
        self.metrics.decision.observe(time.perf_counter() - started)
        if not ranking.endpoints:
            raise NoEndpointAvailable(
                "The routing policy found no endpoint for this request.", code="no_endpoint"
            )
        return ranking

    def _snapshot(self, endpoint: EndpointConfig, stats: EndpointStats) -> EndpointSnapshot:
        return EndpointSnapshot(
            endpoint_id=endpoint.id,
            kind=endpoint.kind,
            in_flight=stats.in_flight,
            max_concurrency=endpoint.max_concurrency,
            input_price_per_1m=endpoint.price.input_per_1m,
            output_price_per_1m=endpoint.price.output_per_1m,
            engine=self.registry.state(endpoint.id).engine,
            latency=stats.latency,
        )

    async def open(
        self,
        call: UpstreamCall,
        request: RouteRequest,
        ranking: Ranking,
        disconnected: Callable[[], Awaitable[Any]],
    ) -> Routed:
        """Open the first endpoint that answers; give up if the client leaves first."""
        opening = asyncio.ensure_future(self._open(call, request, ranking))
        watching = asyncio.ensure_future(disconnected())
        try:
            await asyncio.wait({opening, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
            if not opening.done():
                opening.cancel()
        if opening.cancelled():
            raise ClientGone()
        return opening.result()

    async def _open(self, call: UpstreamCall, request: RouteRequest, ranking: Ranking) -> Routed:
        order = [self.registry.endpoints[s.endpoint_id] for s in ranking.endpoints]
        retrying = AsyncRetrying(
            stop=self._stop,
            wait=self._wait(order),
            retry=retry_if_exception_type(AttemptFailed),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    number = attempt.retry_state.attempt_number
                    endpoint = order[(number - 1) % len(order)]
                    opened = await self._attempt(endpoint, call, request)
                    return Routed(opened, ranking, number)
        except AttemptFailed as last:
            raise _final_error(last) from None
        raise AssertionError("unreachable: tenacity either returns or re-raises")

    def _stop(self, state: RetryCallState) -> bool:
        if state.attempt_number >= self.config.server.max_attempts:
            return True
        failure = state.outcome.exception() if state.outcome else None
        return isinstance(failure, AttemptFailed) and failure.quota_exhausted

    def _wait(self, order: Sequence[EndpointConfig]) -> Callable[[RetryCallState], float]:
        limit_s = self.config.server.max_retry_after_s

        def wait(state: RetryCallState) -> float:
            if len(order) > 1:
                return 0.0  # fail over at once; the next endpoint is a different one
            failure = state.outcome.exception() if state.outcome else None
            hinted = failure.retry_after_s if isinstance(failure, AttemptFailed) else None
            return min(limit_s, hinted if hinted is not None else RETRY_BACKOFF_S)

        return wait

    async def _attempt(
        self, endpoint: EndpointConfig, call: UpstreamCall, request: RouteRequest
    ) -> Opened:
        await self.finisher.start(endpoint.id, call.request_id)
        try:
            return await self.upstream.open(endpoint, call)
        except AttemptFailed as failure:
            self.finisher.failed_attempt(endpoint.id, call.request_id, request, failure)
            raise
        except BaseException:
            self.finisher.abandoned(endpoint.id, call.request_id)
            raise


def _only_candidates(ranking: Ranking, allowed: set[str]) -> Ranking:
    seen: set[str] = set()
    kept = []
    for snapshot in ranking.endpoints:
        if snapshot.endpoint_id in allowed and snapshot.endpoint_id not in seen:
            seen.add(snapshot.endpoint_id)
            kept.append(snapshot)
    return Ranking(tuple(kept), ranking.predicted_ttft_s, ranking.at_risk, ranking.reason)


def _final_error(last: AttemptFailed) -> GatewayError:
    if last.status == 429 and not last.quota_exhausted:
        return Rejected(
            "Every endpoint for this model is rate limited; retry later.",
            status=429,
            reason="upstream_rate_limited",
            retry_after_s=last.retry_after_s or 1.0,
        )
    if last.reason == "first_byte_timeout":
        return UpstreamTimeout(
            "No endpoint answered within the first-byte timeout.", code="upstream_timeout"
        )
    return UpstreamError(
        "Every endpoint tried for this request failed before responding.", code="upstream_failed"
    )
