"""The one orchestrator: candidates -> admission -> policy.rank -> forward with failover.

Policies stay pure because this module enforces the invariants around them: it drops endpoints
that are cooling down or whose shared breaker is open before `rank`, keeps only real candidates
from what the policy returns, turns an empty ranking into one 503, and times the decision.
Snapshots come from local state (the shared view refreshed in the background and the latest
scrapes), so deciding costs no round trip.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

from gateway.config.settings import EndpointConfig, ServerConfig
from gateway.core.admission_control import Admission
from gateway.core.candidates import candidate_snapshots, next_available_in_s, only_candidates
from gateway.core.failover import backoff_s, final_error, gives_up
from gateway.core.outcomes import Finisher
from gateway.errors import (
    AttemptFailed,
    NoEndpointAvailable,
)
from gateway.state.view import SharedView
from gateway.telemetry import tracing
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.record import note_attempt, note_ranking
from gateway.upstream.client import Opened, Upstream, UpstreamCall
from gateway.upstream.departure import Departure
from gateway.watch.endpoints import Registry
from gateway.watch.scraper import Scraper
from policies.base import EndpointSnapshot, Ranking, RouteRequest, RoutingPolicy

DECISION_LOG_SIZE = 1000


class ClientGone(Exception):
    """The client disconnected before the first byte; the upstream attempt was cancelled."""


@dataclass(slots=True)
class Routed:
    opened: Opened
    ranking: Ranking
    attempts: int


Logged = tuple[float, RouteRequest, Ranking, str, float]  # at_s, request, ranking, policy, queued


class DecisionLog:
    """The recent decisions, kept as they were made and turned into dicts only when read (by
    /admin/decisions and the dashboard), not once per request."""

    def __init__(self) -> None:
        self._entries: deque[Logged] = deque(maxlen=DECISION_LOG_SIZE)
        self.append = self._entries.append

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(self._entry, self._entries)

    def __reversed__(self) -> Iterator[dict[str, Any]]:
        return map(self._entry, reversed(self._entries))

    @staticmethod
    def _entry(logged: Logged) -> dict[str, Any]:
        at_s, request, ranking, policy, waited_s = logged
        return {
            "at_s": at_s,
            "request_id": request.request_id,
            "tenant": request.tenant,
            "slo_class": request.slo.name,
            "model": request.model,
            "prompt_tokens": request.prompt_tokens,
            "ranking": [s.endpoint_id for s in ranking.endpoints],
            "policy": policy,
            "predicted_ttft_s": ranking.predicted_ttft_s,
            "predicted_ttft_p95_s": ranking.predicted_ttft_p95_s,
            "at_risk": ranking.at_risk,
            "reason": ranking.reason,
            "queued_s": round(waited_s, 4),
        }


class Router:
    def __init__(
        self,
        server: ServerConfig,
        registry: Registry,
        view: SharedView,
        scraper: Scraper,
        admission: Admission,
        policy: RoutingPolicy,
        upstream: Upstream,
        finisher: Finisher,
        metrics: Metrics,
    ) -> None:
        self.server = server
        self.registry = registry
        self.view = view
        self.scraper = scraper
        self.admission = admission
        self.policy = policy
        self.upstream = upstream
        self.finisher = finisher
        self.metrics = metrics
        self.rng = random.Random()
        self.decisions = DecisionLog()

    def snapshots(self, model: str) -> list[EndpointSnapshot]:
        """One immutable snapshot per endpoint of `model` that is in rotation now."""
        return candidate_snapshots(
            self.registry, self.view, self.scraper.signals, model, time.time()
        )

    def next_available_in_s(self, model: str) -> float:
        """Seconds until an endpoint of `model` is back in rotation (see gateway/candidates)."""
        return next_available_in_s(self.registry, self.view, model, time.time())

    async def decide(self, request: RouteRequest) -> Ranking:
        """Admit (maybe after queueing) and rank; the decision time excludes queueing."""
        started = time.perf_counter()
        candidates = self.snapshots(request.model)
        if not candidates:
            wait_s = self.next_available_in_s(request.model)
            raise NoEndpointAvailable(
                f"No endpoint serving {request.model!r} is available right now; retry shortly.",
                code="no_endpoint_available",
                headers={"retry-after": str(max(1, math.ceil(wait_s)))},
            )
        admitted_at = time.perf_counter()
        with tracing.span("admission"):
            eligible = await self.admission.admit(
                request, candidates, lambda: self.snapshots(request.model)
            )
        waited_s = time.perf_counter() - admitted_at
        with tracing.span("routing"):
            ranking = self.policy.rank(request, eligible, self.rng)
        ranking = only_candidates(ranking, {c.endpoint_id for c in eligible})
        self.metrics.decision.observe(max(0.0, time.perf_counter() - started - waited_s))
        if not ranking.endpoints:
            raise NoEndpointAvailable(
                "The routing policy found no endpoint for this request.", code="no_endpoint"
            )
        self._log(request, ranking, waited_s)
        note_ranking(ranking, waited_s)
        return ranking

    def _log(self, request: RouteRequest, ranking: Ranking, waited_s: float) -> None:
        self.decisions.append((time.time(), request, ranking, self.policy.name, waited_s))

    async def open(
        self,
        call: UpstreamCall,
        request: RouteRequest,
        ranking: Ranking,
        disconnected: Callable[[], Awaitable[Any]],
    ) -> Routed:
        """Open the first endpoint that answers; give up if the client leaves first."""
        departure = Departure(disconnected)
        try:
            with departure:
                return await self._open(call, request, ranking)
        except asyncio.CancelledError:
            if not departure.left:
                raise  # cancelled from outside (shutdown), not by the client leaving
            departure.forgive()
            raise ClientGone() from None

    async def _open(self, call: UpstreamCall, request: RouteRequest, ranking: Ranking) -> Routed:
        """The first attempt runs directly (the common case, and cheaper); tenacity takes over
        only when it failed and the failure allows another."""
        order = [self.registry.endpoints[s.endpoint_id] for s in ranking.endpoints]
        try:
            return Routed(await self._attempt(order[0], call, request), ranking, 1)
        except AttemptFailed as failure:
            if self._gives_up(order, 1, failure):
                raise final_error(failure) from None
            wait_s = self._backoff_s(order, failure)
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        return await self._retry(order, call, request, ranking)

    async def _retry(
        self,
        order: Sequence[EndpointConfig],
        call: UpstreamCall,
        request: RouteRequest,
        ranking: Ranking,
    ) -> Routed:
        """Attempts from the second on; tenacity's attempt n is the request's attempt n + 1."""
        retrying = AsyncRetrying(
            stop=self._stop(order),
            wait=self._wait(order),
            retry=retry_if_exception_type(AttemptFailed),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    number = attempt.retry_state.attempt_number + 1
                    endpoint = order[(number - 1) % len(order)]
                    opened = await self._attempt(endpoint, call, request)
                    return Routed(opened, ranking, number)
        except AttemptFailed as last:
            raise final_error(last) from None
        raise AssertionError("unreachable: tenacity either returns or re-raises")

    def _stop(self, order: Sequence[EndpointConfig]) -> Callable[[RetryCallState], bool]:
        def stop(state: RetryCallState) -> bool:
            failure = state.outcome.exception() if state.outcome else None
            return self._gives_up(order, state.attempt_number + 1, failure)

        return stop

    def _wait(self, order: Sequence[EndpointConfig]) -> Callable[[RetryCallState], float]:
        def wait(state: RetryCallState) -> float:
            failure = state.outcome.exception() if state.outcome else None
            return self._backoff_s(order, failure)

        return wait

    def _gives_up(
        self, order: Sequence[EndpointConfig], made: int, failure: BaseException | None
    ) -> bool:
        return gives_up(made, failure, order[made % len(order)].id, self.server)

    def _backoff_s(self, order: Sequence[EndpointConfig], failure: BaseException | None) -> float:
        return backoff_s(len(order), failure, self.server)

    async def _attempt(
        self, endpoint: EndpointConfig, call: UpstreamCall, request: RouteRequest
    ) -> Opened:
        self.finisher.start(endpoint.id, call.request_id, self.admission.footprint(request))
        note_attempt(endpoint.id)
        try:
            with tracing.upstream_span(endpoint, call):
                return await self.upstream.open(endpoint, call)
        except AttemptFailed as failure:
            self.finisher.failed_attempt(endpoint.id, request, failure)
            raise
        except BaseException:
            self.finisher.abandoned(endpoint.id, call.request_id)
            raise
