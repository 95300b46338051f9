"""The live gateway's own state and decision code, wired to a virtual clock.

Nothing here decides: the decision order is the live router's own `DecisionPipeline`
(gateway/core/decision_pipeline.py: annotate, candidates, admission by thresholds and by the
prediction, the policy's ranking, the deadline queue's dispatch and resume), built from the same
`GatewayConfig` with `now` passed in; the simulator drives it. What stays here is what only a
virtual clock needs, each step named after the live code it stands for:
    tenant limits   `AdmissionControl.admit_tenant`: every limit of the tenant checked and
                    counted in one atomic store call
    background      the `SharedView`'s refresh (every `state.refresh_s`), the fairness counters'
                    sync with the store every second (`FairShare.sync`, as
                    `LiveAdmission.sync_fair_share`), the health probes (`Breakers.probe_due`
                    and `.record`, as `HealthChecker`); scrapes go straight to `scrapes.put`
    attempts        `LocalLeases` (this replica's count, as `LeaseBook`) and `Outcomes`
                    (gateway/core/outcomes.py, as `Finisher`): Retry-After and quota cool-downs,
                    the shared breaker, latency samples, tenant slots given back; the prefix
                    index told where each prompt went and what its engine found cached
The store is the real `MemoryStatsStore`, whose coroutines finish without suspending, so
`run_to_completion` runs each at once, and store writes the live gateway hands to background
tasks run inline: no event loop in virtual time. The shared lease is taken inline
(`InlineLeases`). An error answer becomes the `AttemptFailed` the proxy raises
(`gateway.core.failover.answered_with_error`), and the simulator's event loop fails over along
the ranking by the router's own rules (`gateway.core.failover`: gives_up, backoff_s,
final_error).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.settings import Api, GatewayConfig, parse_config
from gateway.core.admission_control import AdmissionControl
from gateway.core.decision_pipeline import DecisionPipeline
from gateway.core.failover import answered_with_error
from gateway.core.fair_charges import FairShare, weights
from gateway.core.outcomes import Outcomes
from gateway.core.prefix_chain import PrefixChain
from gateway.core.progress import StreamProgress
from gateway.errors import AttemptFailed
from gateway.offline.members import Refusal
from gateway.offline.scenario import Scenario
from gateway.sim.fleet import gateway_endpoints
from gateway.state.background import run_to_completion
from gateway.state.breaker import BreakerPolicy
from gateway.state.leases import LocalLeases
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.view import SharedView
from gateway.telemetry.record import Finished
from gateway.watch.endpoints import Registry
from gateway.watch.health import Breakers
from gateway.watch.scraper import LatestScrapes
from policies.admission import Reject
from policies.base import EngineSignals, Prediction, RouteRequest
from policies.registry import build as build_policy


def offline_config(scenario: Scenario, policy: Mapping[str, Any]) -> GatewayConfig:
    """The gateway config a live run of `scenario` would use, pointing nowhere."""
    fleet = scenario.fleet(list(range(1, 1 + len(scenario.engines) + len(scenario.providers))))
    endpoints = gateway_endpoints(fleet, host="offline.invalid")
    return parse_config(scenario.gateway_config(endpoints, policy), f"scenario {scenario.name}")


@dataclass(frozen=True, slots=True)
class Queued:
    """A request waiting in the admission queue (the simulator's handle on it)."""

    index: int
    route: RouteRequest
    api: Api = "chat"  # the simulator replays chat only
    owner: str | None = None


class InlineLeases(LocalLeases):
    """`LeaseBook` over a store that never suspends: the shared lease taken and dropped at once
    (live, a background task does it, the drop chained after the take)."""

    def __init__(self, view: SharedView, store: MemoryStatsStore, ttl_s: float) -> None:
        super().__init__(view)
        self.store = store
        self.ttl_s = ttl_s

    def take(
        self,
        endpoint_id: str,
        request_id: str,
        tokens: int,
        prefill: int = 0,
        predicted: Prediction | None = None,
    ) -> None:
        super().take(endpoint_id, request_id, tokens, prefill, predicted)
        now = self.view.clock()
        run_to_completion(self.store.acquire(endpoint_id, request_id, ttl_s=self.ttl_s, now=now))

    def drop(self, endpoint_id: str, request_id: str) -> bool:
        if not super().drop(endpoint_id, request_id):
            return False
        run_to_completion(self.store.release(endpoint_id, request_id, now=self.view.clock()))
        return True


class GatewayModel:
    def __init__(self, config: GatewayConfig, *, seed: int) -> None:
        state = config.state
        self.config = config
        self.server = config.server
        self.now_s = 0.0  # the virtual clock; the simulator moves it before each event
        self.registry = Registry(config.endpoints)
        self.store = MemoryStatsStore(window_s=state.window_s, bucket_s=state.bucket_s)
        self._ids = [e.id for e in config.endpoints]
        self.view = SharedView(self.store, self._ids, state.refresh_s, clock=self._clock)
        self.scrapes = LatestScrapes(state.scrape_stale_after_s, state.rate_window_s)
        breaker = BreakerPolicy(state.breaker_failures, state.breaker_cooldown_s)
        self.breakers = Breakers(self.store, breaker)
        self.leases = InlineLeases(self.view, self.store, config.server.lease_ttl_s)
        limits = {name: tenant.limits for name, tenant in config.tenants.items()}
        self.admission: AdmissionControl[Queued] = AdmissionControl(
            config.admission,
            limits,
            self.store,
            run_to_completion,
            config.server.lease_ttl_s,
            fair=FairShare(weights(config)),
        )
        self.outcomes = Outcomes(
            self.leases, self.registry, self.breakers, self.view, run_to_completion
        )
        policy = build_policy(config.policy)
        self.pipeline: DecisionPipeline[Queued] = DecisionPipeline(
            self.registry, self.view, self._signals, self.admission, policy, random.Random(seed)
        )
        self.chains: dict[str, PrefixChain] = {}  # request id -> its chain, while in flight

    def _clock(self) -> float:
        return self.now_s

    def _signals(self, endpoint_id: str) -> EngineSignals | None:
        return self.scrapes.signals(endpoint_id, self.now_s)

    # -- background work: view refresh, probes (scrapes go straight to `scrapes.put`) ----------

    def refresh(self) -> None:
        """`SharedView.run`'s step: one store read for every endpoint."""
        run_to_completion(self.view.refresh())

    def sync_fair_share(self, now_s: float) -> None:
        """`LiveAdmission.sync_fair_share`'s step: the fairness counters sent and read back."""
        run_to_completion(self.admission.fair.sync(self.store, now_s))

    def probe(self, healthy: Mapping[str, bool], now_s: float) -> None:
        """`HealthChecker.check_once`, with each probe's answer given by the fleet."""
        for endpoint_id in run_to_completion(self.breakers.probe_due(self._ids, now_s)):
            run_to_completion(self.breakers.record(endpoint_id, ok=healthy[endpoint_id], now=now_s))

    # -- the request path ----------------------------------------------------------------------

    def tenant_check(self, route: RouteRequest, now_s: float) -> Reject | None:
        return run_to_completion(self.admission.admit_tenant(route, now_s))

    # -- attempts ------------------------------------------------------------------------------

    def annotate(self, route: RouteRequest, body: Mapping[str, Any] | None) -> RouteRequest:
        """The pipeline's `annotate`; the chain kept while the request is in flight."""
        route, chain = self.pipeline.annotate(route, body)
        if body is not None:
            self.chains[route.request_id] = chain
        return route

    def take(
        self, endpoint_id: str, route: RouteRequest, predicted: Prediction | None = None
    ) -> None:
        """`Finisher.start`, with the footprint and prediction `Forwarder._attempt` passes;
        then, as `Router.handle` once an endpoint took it, the pipeline's `sent`."""
        footprint = self.admission.footprint(route)
        self.outcomes.started(endpoint_id, route, footprint, predicted)
        chain = self.chains.get(route.request_id)
        if chain is not None:
            self.pipeline.sent(endpoint_id, route, chain, self.now_s)

    def classify(self, endpoint_id: str, refusal: Refusal, now_s: float) -> AttemptFailed:
        """The failure an error answer counts as, read as `gateway.upstream.client` reads it."""
        status, headers, body = refusal.status, refusal.headers, refusal.body
        return answered_with_error(endpoint_id, status, headers, body, now_s)

    def failed_attempt(
        self, endpoint_id: str, route: RouteRequest, failure: AttemptFailed, now_s: float
    ) -> None:
        self.outcomes.failed_attempt(endpoint_id, route, failure, now_s)

    def streamed(
        self,
        endpoint_id: str,
        route: RouteRequest,
        progress: StreamProgress,
        tokens: int,
        ttft_s: float,
        now_s: float,
    ) -> None:
        """`Finisher.watching`'s report: an engine delivered a stream's token number `tokens`
        now (`ttft_s` after the attempt was sent); the simulator calls only when one is due."""
        self.outcomes.streamed(endpoint_id, route, progress, tokens, ttft_s, now_s, now_s)

    def finished(
        self,
        endpoint_id: str,
        route: RouteRequest,
        result: Finished,
        limit_headers: Mapping[str, str] | None,
        now_s: float,
        progress: StreamProgress | None = None,
    ) -> None:
        """`Finisher.finish`, then `Router.handle`'s end: the tenant's concurrency slot goes back.
        `limit_headers`: a provider's rate-limit headers; `progress`: an engine stream's."""
        self.outcomes.finished(endpoint_id, route, result, limit_headers, now_s, progress)
        self.admission.finished(route, now_s)
        cached = result.cached_tokens or 0
        self.admission.served(route, result.prompt_tokens, cached, result.output_tokens)
        chain = self.chains.pop(route.request_id, None)
        if chain is not None:
            self.pipeline.answered(endpoint_id, route, chain, result, now_s)

    def request_done(self, route: RouteRequest, now_s: float) -> None:
        """`LiveAdmission.finished`: the tenant's concurrency slot goes back (and a fairness
        charge, if it was admitted, is taken back)."""
        self.admission.finished(route, now_s)
        self.admission.served(route, 0, 0, 0)
        self.chains.pop(route.request_id, None)
