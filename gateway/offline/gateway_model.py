"""The gateway's decision path in virtual time, from the live gateway's config and parts.

It follows the live request path step by step, on the same `GatewayConfig`:
    tenant limits   `gateway/admission.py` `admit_tenant`: every limit of the tenant checked and
                    counted in one atomic store call
    candidates      `Router.snapshots`: endpoints in the `Registry`'s rotation whose shared
                    breaker is closed and cooldown over; in-flight = this replica's leases now
                    (plus other replicas' as of the last refresh, none here), latency statistics
                    as of the last `SharedView` refresh (every `state.refresh_s`), engine gauges
                    as of the last scrape with their age (stale after `scrape_stale_after_s`)
    admission       `Admission.admit`: saturation with hysteresis, `decide`, the deadline queue;
                    the eligible endpoints are those with headroom (or all when none has)
    routing         the policy from `policies.registry` ranks the eligible endpoints
    attempts        `gateway/outcome.py`: leases, Retry-After and quota cooldowns, the shared
                    breaker (5xx and no-answer failures count; 429s only cool down), samples
    health probes   `HealthChecker.check_once` every `state.health_interval_s`
The decisions themselves are the real ones (`policies.admission`, `policies.registry`); the
store is the real `MemoryStatsStore`, whose coroutines never suspend (gateway/stats/memory.py),
so `run_to_completion` runs each synchronously: no event loop in virtual time.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from gateway.admission import TENANT_REASONS, TENANT_RETRY_AFTER_S, TENANT_WINDOW_S
from gateway.offline.members import EngineGauges, Refusal, engine_gauges
from gateway.offline.scenario import Scenario
from gateway.registry import Registry
from gateway.settings import GatewayConfig, parse_config
from gateway.signals import classify_error, parse_rate_limits
from gateway.sim.fleet import gateway_endpoints
from gateway.sim.model import EngineSnapshot
from gateway.stats.base import EndpointStats, LatencySample, TenantQuota
from gateway.stats.breaker import BreakerPolicy
from gateway.stats.memory import MemoryStatsStore
from policies import admission
from policies.admission import Admit, DeadlineQueue, Decision, Reject, Saturation
from policies.base import EndpointSnapshot, EngineSignals, Ranking, RouteRequest
from policies.registry import build as build_policy

T = TypeVar("T")
_NO_STATS = EndpointStats()


def run_to_completion(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that finishes without suspending (MemoryStatsStore's)."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        result: T = finished.value
        return result
    coroutine.close()
    raise RuntimeError("the stats store suspended; the offline simulator needs one that does not")


def offline_config(scenario: Scenario, policy: Mapping[str, Any]) -> GatewayConfig:
    """The gateway config a live run of `scenario` would use, pointing nowhere."""
    fleet = scenario.fleet(list(range(1, 1 + len(scenario.engines) + len(scenario.providers))))
    endpoints = gateway_endpoints(fleet, host="offline.invalid")
    return parse_config(scenario.gateway_config(endpoints, policy), f"scenario {scenario.name}")


@dataclass(frozen=True, slots=True)
class Failure:
    """An attempt that failed before the first byte, as `gateway.proxy.AttemptFailed` says."""

    status: int  # 0: no answer within the first-byte timeout
    retry_after_s: float | None = None  # how long the endpoint is cooled down
    quota_exhausted: bool = False


TIMED_OUT = Failure(0)


@dataclass(frozen=True, slots=True)
class Queued:
    """A request waiting in the admission queue (the simulator's handle on it)."""

    index: int
    route: RouteRequest


class GatewayModel:
    def __init__(self, config: GatewayConfig, *, seed: int) -> None:
        state = config.state
        self.config = config
        self.server = config.server
        self.params = config.admission
        self.registry = Registry(config.endpoints)
        self.store = MemoryStatsStore(window_s=state.window_s, bucket_s=state.bucket_s)
        self.breaker = BreakerPolicy(state.breaker_failures, state.breaker_cooldown_s)
        self.policy = build_policy(config.policy)
        self.rng = random.Random(seed)
        self.limits = {name: tenant.limits for name, tenant in config.tenants.items()}
        self.queue: DeadlineQueue[Queued] = DeadlineQueue(self.params.queue_max_size)
        self.states: dict[str, Saturation] = {}
        self.local: Counter[str] = Counter()
        self.local_tokens: Counter[str] = Counter()  # KV footprint of the local in-flight
        self.in_flight_at_take: dict[tuple[str, str], int] = {}  # as LeaseBook: for TPOT fits
        self._ids = [e.id for e in config.endpoints]
        self._shared: Mapping[str, EndpointStats] = {}
        self._local_at_refresh: Counter[str] = Counter()
        self._scraped: dict[str, tuple[float, EngineGauges]] = {}
        self._stale_after_s = state.scrape_stale_after_s
        # per model, what snapshots copy from the config: read once, not per request
        self._static = {
            model: [
                (e.id, e.kind, e.max_concurrency, e.price.input_per_1m, e.price.output_per_1m)
                for e in self.registry.serving(model)
            ]
            for model in self.registry.models()
        }

    # -- background state: view refresh, scrapes, probes ---------------------------------------

    def refresh(self, now_s: float) -> None:
        """`SharedView.refresh`: one store read for every endpoint."""
        local = self.local.copy()
        self._shared = run_to_completion(self.store.read(self._ids, now=now_s))
        self._local_at_refresh = local

    def scraped(self, endpoint_id: str, snapshot: EngineSnapshot, now_s: float) -> None:
        self._scraped[endpoint_id] = (now_s, engine_gauges(snapshot))

    def probe(self, healthy: Mapping[str, bool], now_s: float) -> None:
        """`HealthChecker.check_once`: probe every endpoint whose breaker lets a probe through."""
        stats = run_to_completion(self.store.read(self._ids, now=now_s))
        for endpoint_id in self._ids:
            phase = stats[endpoint_id].breaker.phase(now_s)
            if phase == "open":
                continue
            if phase == "half_open" and not run_to_completion(
                self.store.claim_trial(endpoint_id, now=now_s, policy=self.breaker)
            ):
                continue
            self._record_health(endpoint_id, ok=healthy[endpoint_id], now_s=now_s)

    # -- the request path ----------------------------------------------------------------------

    def snapshots(self, model: str, now_s: float) -> list[EndpointSnapshot]:
        """`Router.snapshots`: the endpoints of `model` in rotation now."""
        found = []
        shared, local, tokens = self._shared, self.local, self.local_tokens
        for endpoint_id, kind, limit, price_in, price_out in self._static[model]:
            stats = shared.get(endpoint_id, _NO_STATS)
            if self.registry.available(endpoint_id, now_s) and stats.available(now_s):
                others = stats.in_flight - self._local_at_refresh[endpoint_id]
                found.append(
                    EndpointSnapshot(
                        endpoint_id=endpoint_id,
                        kind=kind,
                        in_flight=(others if others > 0 else 0) + local[endpoint_id],
                        in_flight_tokens=tokens[endpoint_id],
                        max_concurrency=limit,
                        input_price_per_1m=price_in,
                        output_price_per_1m=price_out,
                        engine=self._signals(endpoint_id, now_s),
                        latency=stats.latency,
                    )
                )
        return found

    def _signals(self, endpoint_id: str, now_s: float) -> EngineSignals | None:
        """`Scraper.signals`: the latest scrape with its age; values unknown once stale.
        In-flight above is `SharedView.stats`: other replicas' leases as of the refresh (none
        here) plus this replica's, counted now."""
        scraped = self._scraped.get(endpoint_id)
        if scraped is None:
            return None
        at_s, gauges = scraped
        age_s = now_s - at_s
        if age_s > self._stale_after_s:
            return EngineSignals(age_s=age_s)
        return EngineSignals(*gauges, age_s)

    def tenant_check(self, route: RouteRequest, now_s: float) -> Reject | None:
        """`Admission.admit_tenant`: every limit checked and counted at once; None = go on."""
        limits = self.limits.get(route.tenant)
        if limits is None or not (
            limits.requests_per_min or limits.tokens_per_min or limits.max_concurrent
        ):
            return None
        quota = TenantQuota(
            limits.requests_per_min, limits.tokens_per_min, limits.max_concurrent, TENANT_WINDOW_S
        )
        verdict = run_to_completion(
            self.store.admit_tenant(
                route.tenant,
                route.request_id,
                tokens=route.prompt_tokens + (route.max_tokens or 0),
                quota=quota,
                ttl_s=self.server.lease_ttl_s,
                now=now_s,
            )
        )
        if verdict == "admitted":
            return None
        return Reject(429, TENANT_REASONS[verdict], TENANT_RETRY_AFTER_S)

    def admit(
        self, route: RouteRequest, snapshots: Sequence[EndpointSnapshot], now_s: float
    ) -> tuple[Decision, list[EndpointSnapshot]]:
        """`Admission.admit`: the decision, and when admitted the endpoints with headroom for
        the class (all of them when none has)."""
        states = self._states_for(route, snapshots)
        decision = admission.decide(
            route.slo, states.values(), self.params, now_s=now_s, queued=len(self.queue)
        )
        if not isinstance(decision, Admit):
            return decision, []
        return decision, self._eligible(route, snapshots, states)

    def eligible(self, route: RouteRequest, now_s: float) -> list[EndpointSnapshot]:
        """After waiting in the queue: fresh snapshots, states, and those with headroom."""
        snapshots = self.snapshots(route.model, now_s)
        return self._eligible(route, snapshots, self._states_for(route, snapshots))

    def _eligible(
        self,
        route: RouteRequest,
        snapshots: Sequence[EndpointSnapshot],
        states: Mapping[str, Saturation],
    ) -> list[EndpointSnapshot]:
        return admission.with_headroom(snapshots, states, route.slo, self.params) or list(snapshots)

    def fits(self, route: RouteRequest, now_s: float) -> bool:
        """`Admission._fits`: some endpoint has headroom for this queued request now."""
        states = self._states_for(route, self.snapshots(route.model, now_s))
        return any(admission.has_headroom(s, route.slo, self.params) for s in states.values())

    def footprint(self, route: RouteRequest) -> int:
        """KV tokens the request will hold at most: its prompt plus its output."""
        return route.prompt_tokens + (route.max_tokens or self.params.default_output_tokens)

    def _states_for(
        self, route: RouteRequest, snapshots: Sequence[EndpointSnapshot]
    ) -> dict[str, Saturation]:
        """Each endpoint's saturation (with hysteresis), as this request would find it."""
        states = admission.next_saturations(self.states, snapshots, self.params)
        self.states.update(states)
        return admission.request_states(states, snapshots, self.footprint(route), self.params)

    def rank(self, route: RouteRequest, eligible: Sequence[EndpointSnapshot]) -> Ranking:
        ranking = self.policy.rank(route, eligible, self.rng)
        allowed = {s.endpoint_id for s in eligible}
        kept = []
        for snapshot in ranking.endpoints:  # as router._only_candidates: real and unique
            if snapshot.endpoint_id in allowed:
                allowed.discard(snapshot.endpoint_id)
                kept.append(snapshot)
        return replace(ranking, endpoints=tuple(kept))

    # -- attempts ------------------------------------------------------------------------------

    def take(self, endpoint_id: str, route: RouteRequest, now_s: float) -> None:
        """`LeaseBook.take`: counted locally at once (with its KV footprint), shared too."""
        self.local[endpoint_id] += 1
        self.local_tokens[endpoint_id] += self.footprint(route)
        self.in_flight_at_take[(endpoint_id, route.request_id)] = self._in_flight(endpoint_id)
        lease = self.store.acquire(
            endpoint_id, route.request_id, ttl_s=self.server.lease_ttl_s, now=now_s
        )
        run_to_completion(lease)

    def _in_flight(self, endpoint_id: str) -> int:
        stats = self._shared.get(endpoint_id, _NO_STATS)
        others = stats.in_flight - self._local_at_refresh[endpoint_id]
        return (others if others > 0 else 0) + self.local[endpoint_id]

    def _drop(self, endpoint_id: str, route: RouteRequest, now_s: float) -> None:
        self.in_flight_at_take.pop((endpoint_id, route.request_id), None)
        self.local[endpoint_id] -= 1
        self.local_tokens[endpoint_id] -= self.footprint(route)
        run_to_completion(self.store.release(endpoint_id, route.request_id, now=now_s))

    def classify(self, refusal: Refusal, now_s: float) -> Failure:
        """`gateway.proxy._raise_for_status`: the gateway's reading of an error answer."""
        verdict = classify_error(refusal.status, refusal.headers, refusal.body, now=now_s)
        return Failure(refusal.status, verdict.cooldown_s, verdict.unavailable)

    def failed_attempt(
        self, endpoint_id: str, route: RouteRequest, failure: Failure, now_s: float
    ) -> None:
        """`Finisher.failed_attempt`."""
        self._drop(endpoint_id, route, now_s)
        if failure.quota_exhausted and failure.retry_after_s:
            self._cool_down(endpoint_id, now_s + failure.retry_after_s, "insufficient_quota", now_s)
        elif failure.retry_after_s:
            self._cool_down(endpoint_id, now_s + failure.retry_after_s, "retry_after", now_s)
        if failure.status != 429:
            self._record_health(endpoint_id, ok=False, now_s=now_s)
        sample = LatencySample(
            now_s, False, failure.status, route.prompt_tokens, 0, None, None, 0.0
        )
        run_to_completion(self.store.observe(endpoint_id, sample))

    def finished(
        self,
        endpoint_id: str,
        route: RouteRequest,
        sample: LatencySample,
        limit_headers: Mapping[str, str] | None = None,
    ) -> None:
        """`Finisher.finish` for a request that got an answer (ok or a relayed client error);
        `limit_headers`: a provider's rate-limit headers on its response."""
        now_s = sample.at_s
        in_flight = self.in_flight_at_take.pop((endpoint_id, route.request_id), 0)
        sample = replace(sample, in_flight=in_flight)
        self._drop(endpoint_id, route, now_s)
        self.request_done(route, now_s)
        if self._shared.get(endpoint_id, _NO_STATS).breaker.failures:
            self._record_health(endpoint_id, ok=True, now_s=now_s)
        if limit_headers:
            wait_s = parse_rate_limits(limit_headers, now=now_s).exhausted_for_s()
            if wait_s:
                self._cool_down(endpoint_id, now_s + wait_s, "rate_limit_exhausted", now_s)
        run_to_completion(self.store.observe(endpoint_id, sample))

    def request_done(self, route: RouteRequest, now_s: float) -> None:
        """`Admission.finished`: the tenant's concurrency slot goes back."""
        limits = self.limits.get(route.tenant)
        if limits is not None and limits.max_concurrent:
            run_to_completion(self.store.release_tenant(route.tenant, route.request_id, now=now_s))

    def _record_health(self, endpoint_id: str, *, ok: bool, now_s: float) -> None:
        run_to_completion(
            self.store.record_result(endpoint_id, ok=ok, now=now_s, policy=self.breaker)
        )

    def _cool_down(self, endpoint_id: str, until_s: float, reason: str, now_s: float) -> None:
        self.registry.cool_down(endpoint_id, until_s, reason)
        run_to_completion(self.store.cool_down(endpoint_id, until_s=until_s, now=now_s))
