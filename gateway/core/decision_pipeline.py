"""The decision order, written once: what happens to a request between its arrival and its
first attempt, for the live router (gateway/server/router.py, on the wall clock) and the offline
simulator (gateway/offline/gateway_model.py, in virtual time) alike.

    annotate    the prompt's chain looked up in the prefix index: each endpoint's predicted
                cached tokens go onto the request (`with_cached`; a policy then reads
                `RouteRequest.cached_tokens`, discounted by the endpoint's precision, and
                nothing else of the index)
    tenant      the tenant's limits and budget: one atomic store call
                (`AdmissionControl.tenant_ticket`), the only step that awaits; each driver
                awaits it its own way, then calls `decide`
    decide      the candidates in rotation now (`candidate_snapshots`), admission by thresholds
                and by the policy's ranking judged with its own prediction
                (`AdmissionControl.decide`); the ranking kept to real candidates
                (`only_candidates`)
    wait        a request told to `Queue` waits until the deadline queue's `dispatch` releases
                it (live: a future; offline: an event), then `resume`s: ranked on fresh
                candidates with headroom
    sent        the endpoint took the request: the prefix index learns where the chain went
                (`routed`)
    answered    the engine said how much it found cached: the index is calibrated (`answered`)
Synchronous, with `now` passed in, so a driver in virtual time runs exactly what production
runs; acting on a decision (errors, metrics, waiting, sending) is the driver's.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping, Sequence
from typing import Any, Generic, NamedTuple

from gateway.config.settings import Api
from gateway.core.admission_control import AdmissionControl, W, estimator_of
from gateway.core.candidates import (
    Signals,
    candidate_snapshots,
    next_available_in_s,
    only_candidates,
)
from gateway.core.context_window import model_window
from gateway.core.prefix_chain import EMPTY, PrefixChain, chain_of
from gateway.core.prefix_index import PrefixIndex
from gateway.state.view import SharedView
from gateway.telemetry import tracing
from gateway.telemetry.record import Finished
from gateway.watch.endpoints import Registry
from policies.admission import Queue, Reject
from policies.base import EndpointSnapshot, EngineSignals, Ranking, RouteRequest, RoutingPolicy


class Unavailable(enum.Enum):
    """Why a request has no endpoint to go to; the value is the error code it is refused with."""

    NONE_IN_ROTATION = "no_endpoint_available"  # each cooling down or its breaker open
    NONE_RANKED = "no_endpoint"  # the policy ranked none of the candidates


Outcome = Ranking | Queue | Reject | Unavailable


class Decided(NamedTuple, Generic[W]):
    """`decide`'s answer: what to do with the request, and the waiters a full queue gave its
    place to (for the driver to refuse with `queue_full`, as the queue would have refused
    them on arrival)."""

    outcome: Outcome
    displaced: list[W]


class DecisionPipeline(Generic[W]):
    def __init__(
        self,
        registry: Registry,
        view: SharedView,
        signals: Signals,
        admission: AdmissionControl[W],
        policy: RoutingPolicy,
        rng: random.Random,
    ) -> None:
        """`signals`: an endpoint's latest scraped engine signals on the driver's clock;
        `policy` may be swapped on a config reload."""
        self.registry = registry
        self.view = view
        self.signals = signals
        self.admission = admission
        self.policy = policy
        self.rng = rng
        self.prefix = PrefixIndex()

    @property
    def policy_name(self) -> str:
        return self.policy.name

    def annotate(
        self, route: RouteRequest, body: Mapping[str, Any] | None
    ) -> tuple[RouteRequest, PrefixChain]:
        """The request with its predicted cached tokens per endpoint, and its prompt's chain."""
        if body is None:
            return route, EMPTY
        chain = chain_of(body)
        if not chain.hashes:
            return route, EMPTY
        return with_cached(route, self.prefix, chain), chain

    def window(self, model: str, api: Api) -> int | None:
        """The model's context window in tokens, where its endpoints declare one."""
        return model_window(self.registry, model, api)

    def candidates(
        self, model: str, now: float, api: Api = "chat", owner: str | None = None
    ) -> list[EndpointSnapshot]:
        """One immutable snapshot per endpoint of `model` in rotation at `now`, serving `api`
        (only `owner` for a call pinned to the endpoint that stored its previous response)."""
        found = candidate_snapshots(self.registry, self.view, self.signals, model, now, api)
        if owner is not None:
            return [s for s in found if s.endpoint_id == owner]
        return found

    def next_available_in_s(self, model: str, now: float, api: Api = "chat") -> float:
        """Seconds until an endpoint of `model` is back in rotation (a refusal's Retry-After)."""
        return next_available_in_s(self.registry, self.view, model, now, api)

    def decide(
        self, route: RouteRequest, now: float, api: Api = "chat", owner: str | None = None
    ) -> Decided[W]:
        """Admit and rank: the ranking to send the request along now, or `Queue` (wait, then
        `resume`), or the refusal."""
        current = self.candidates(route.model, now, api, owner)
        if not current:
            return Decided(Unavailable.NONE_IN_ROTATION, [])
        estimator = estimator_of(self.policy)
        outcome: Outcome = self.admission.decide(
            route, current, now, lambda eligible: self.rank(route, eligible, owner), estimator
        )
        if isinstance(outcome, Ranking) and not outcome.endpoints:
            outcome = Unavailable.NONE_RANKED
        return Decided(outcome, self.admission.take_displaced())

    def resume(
        self, route: RouteRequest, now: float, api: Api = "chat", owner: str | None = None
    ) -> Ranking | Unavailable:
        """A request the queue released: ranked on fresh candidates with headroom."""
        current = self.candidates(route.model, now, api, owner)
        ranking = self.rank(route, self.admission.eligible(route, current), owner)
        return ranking if ranking.endpoints else Unavailable.NONE_RANKED

    def dispatch(self, now: float) -> tuple[list[W], list[W]]:
        """One tick of the deadline queue: (the waiters that can no longer meet their deadline,
        those released to `resume`), each judged on the candidates it may go to now."""

        def candidates(waiter: W) -> list[EndpointSnapshot]:
            return self.candidates(waiter.route.model, now, waiter.api, waiter.owner)

        return self.admission.dispatch(now, candidates)

    def rank(
        self, route: RouteRequest, eligible: Sequence[EndpointSnapshot], owner: str | None = None
    ) -> Ranking:
        """The policy's ranking of `eligible`, kept to them; a pinned call is not ranked."""
        if owner is not None:
            return Ranking(tuple(eligible), reason="owner")
        with tracing.span("routing"):
            ranking = self.policy.rank(route, eligible, self.rng)
        return only_candidates(ranking, {c.endpoint_id for c in eligible})

    def sent(self, endpoint_id: str, route: RouteRequest, chain: PrefixChain, now: float) -> None:
        """The endpoint took the request: it will compute the uncached part and the answer."""
        uncached = route.prompt_tokens - route.cached_tokens.get(endpoint_id, 0.0)
        written = uncached + (route.max_tokens or DEFAULT_OUTPUT_TOKENS)
        routed(self.prefix, self.signals(endpoint_id), endpoint_id, chain, written, now)

    def answered(
        self,
        endpoint_id: str,
        route: RouteRequest,
        chain: PrefixChain,
        result: Finished,
        now: float,
    ) -> None:
        """The engine said how much of the prompt it found cached: calibrate the index."""
        if result.cached_tokens is None or not chain.hashes or result.outcome != "ok":
            return
        cached, prompt = result.cached_tokens, result.prompt_tokens
        answered(self.prefix, endpoint_id, route, chain, cached, prompt, now)


DEFAULT_OUTPUT_TOKENS = 256  # an answer's KV writes, when max_tokens does not bound them


def with_cached(request: RouteRequest, index: PrefixIndex, chain: PrefixChain) -> RouteRequest:
    """The request with the tokens each endpoint is predicted to hold cached (`cached_tokens`),
    over the endpoints the index knows; the same request when none holds its first block."""
    if not chain.hashes or not index.masks:
        return request
    cached = index.cached(chain, request.prompt_tokens)
    if not cached:
        return request
    r = request  # positional: about half what dataclasses.replace costs, once per request
    return RouteRequest(
        r.request_id, r.model, r.tenant, r.slo, r.prompt_tokens, r.max_tokens, r.stream, r.seq,
        r.session, cached, r.fairness_key,
    )  # fmt: skip


def routed(
    index: PrefixIndex,
    engine: EngineSignals | None,
    endpoint_id: str,
    chain: PrefixChain,
    written_tokens: float,
    now: float,
) -> None:
    """A request was sent to `endpoint_id`: fold in its engine's latest counters, then the
    request's own writes and chain."""
    if engine is not None:
        queries, hits = engine.prefix_cache_queries_total, engine.prefix_cache_hits_total
        computed = queries - hits if queries is not None and hits is not None else None
        index.scraped(endpoint_id, computed, engine.kv_capacity_tokens, now)
    if chain.hashes:
        index.routed(endpoint_id, chain, written_tokens, now)


def answered(
    index: PrefixIndex,
    endpoint_id: str,
    request: RouteRequest,
    chain: PrefixChain,
    cached: int,
    prompt: int,
    now: float,
) -> None:
    """The engine found `cached` of its `prompt` tokens (its own count) in its cache: calibrate
    the index. The prediction is in the gateway's estimated tokens, so it is first rescaled to
    the engine's count: against a real vLLM the estimate ran 25-33% high (tests/engines/
    test_vllm_prefix.py), and unscaled every exact hit read as a 20-25% miss, pulling the
    endpoint's precision down and shrinking its kappa."""
    predicted = request.cached_tokens.get(endpoint_id, 0.0)
    if request.prompt_tokens > 0 and prompt > 0:
        predicted *= prompt / request.prompt_tokens  # x 1.0 offline: the sim counts the estimate
    index.calibrate(endpoint_id, chain, predicted, cached, prompt, now)
