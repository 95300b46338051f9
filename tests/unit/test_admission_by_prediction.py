"""Admission by the routing prediction (policies/admission.py, "By prediction"), through
`AdmissionControl.decide` with the real slo_aware policy and its estimator."""

from __future__ import annotations

import random
from collections.abc import Coroutine, Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config.settings import SloClassConfig
from gateway.core.admission_control import AdmissionControl, estimator_of
from gateway.state.memory_store import MemoryStatsStore
from policies.admission import AdmissionParams, Queue, Reason, Reject
from policies.base import (
    EndpointSnapshot,
    EngineSignals,
    LatencyEstimate,
    Ranking,
    RouteRequest,
    RoutingPolicy,
    SloTarget,
)
from policies.fair_share import Counters
from policies.least_loaded import LeastLoaded
from policies.least_loaded import Params as LeastLoadedParams
from policies.slo_aware import Params, SloAware

CHAT = SloTarget("chat", ttft_s=0.5, priority=10)
NOW_S = 1000.0
# The engines' queues judged by prediction alone; a KV gauge at 0.99 still saturates.
PARAMS = AdmissionParams(queue_threshold=1000)
# Warm: TTFT 50 ms + 0.1 ms per prompt token, its p95 1.2x the mean, as measured.
WARM = LatencyEstimate(
    samples=100,
    ttft_mean_s=0.15,
    ttft_base_s=0.05,
    ttft_per_token_s=1e-4,
    tpot_mean_s=0.02,
    prompt_tokens_mean=1000,
    ttft_ratio_n=100,
    ttft_ratio_p95=1.2,
    tpot_ratio_n=100,
    tpot_ratio_p95=1.2,
)


def endpoint(
    endpoint_id: str, waiting: int = 0, stats: LatencyEstimate = WARM, kv: float = 0.1
) -> EndpointSnapshot:
    """`waiting` requests queued in the engine (each about 150 ms of prefill ahead)."""
    signals = EngineSignals(waiting=waiting, running=8, kv_usage=kv, age_s=0.1)
    in_flight = waiting + 8 if waiting else 0
    return EndpointSnapshot(endpoint_id, "vllm", in_flight=in_flight, engine=signals, latency=stats)


def request(
    slo: SloTarget = CHAT, prompt_tokens: int = 1000, tenant: str = "app", request_id: str = "r"
) -> RouteRequest:
    return RouteRequest(request_id, "m", tenant, slo, prompt_tokens, 50, True)


def control() -> AdmissionControl[Any]:
    def never(coroutine: Coroutine[Any, Any, Any]) -> None:
        coroutine.close()

    return AdmissionControl(PARAMS, {}, MemoryStatsStore(), never, lease_ttl_s=60)


def decide(
    candidates: Sequence[EndpointSnapshot],
    route: RouteRequest | None = None,
    policy: RoutingPolicy | None = None,
    admission: AdmissionControl[Any] | None = None,
) -> Reject | Queue | Ranking:
    route = route or request()
    policy = policy or SloAware(Params(explore_fraction=0.0))
    admission = admission or control()

    def rank(eligible: Sequence[EndpointSnapshot]) -> Ranking:
        return policy.rank(route, eligible, random.Random(0))

    return admission.decide(route, candidates, NOW_S, rank, estimator_of(policy))


def test_admits_to_an_endpoint_that_meets_the_class_and_spills_past_a_loaded_one() -> None:
    decision = decide([endpoint("loaded", waiting=20), endpoint("idle")])
    assert isinstance(decision, Ranking)
    assert decision.endpoints[0].endpoint_id == "idle" and decision.reason == "slo_met"


def test_admits_at_risk_what_is_predicted_to_meet_at_its_mean_but_not_its_p95() -> None:
    decision = decide([endpoint("a", waiting=2)])  # mean about 0.45 s, p95 about 0.54 s
    assert isinstance(decision, Ranking) and decision.reason == "slo_at_risk"


def test_refuses_at_once_by_load_with_a_retry_after_from_the_drain() -> None:
    decision = decide([endpoint("a", waiting=20), endpoint("b", waiting=40)])
    assert isinstance(decision, Reject)
    assert (decision.status, decision.reason) == (503, Reason.OVERLOADED)
    # a's p95 is about 1.2 x (20 x 0.15 s queued + 0.15 s) = 3.8 s against 0.5 s
    assert decision.retry_after_s == 4.0
    sheddable = request(SloTarget("batch", ttft_s=0.5, sheddable=True))
    shed = decide([endpoint("a", waiting=20)], sheddable)
    assert isinstance(shed, Reject) and shed.status == 429


def test_a_request_that_would_queue_is_refused_at_once_when_waiting_cannot_help() -> None:
    full = [endpoint("a", waiting=20, kv=0.99), endpoint("b", waiting=20, kv=0.99)]
    decision = decide(full)
    assert isinstance(decision, Reject) and decision.reason == Reason.OVERLOADED
    can_meet = decide([endpoint("a", kv=0.99)])  # saturated, but predicted to meet: it waits
    assert isinstance(can_meet, Queue)


def test_a_deadline_class_is_admitted_while_its_deadline_can_be_met() -> None:
    report = request(SloTarget("report", deadline_s=30.0, priority=5))
    assert isinstance(decide([endpoint("a", waiting=20)], report), Ranking)
    tight = request(SloTarget("report", deadline_s=2.0, priority=5))
    assert isinstance(decide([endpoint("a", waiting=20)], tight), Reject)


def test_a_request_too_large_for_its_class_even_idle_is_served_best_effort() -> None:
    oversized = request(prompt_tokens=10_000)  # its prefill alone, about 1 s, misses 0.5 s
    decision = decide([endpoint("a"), endpoint("b", waiting=20)], oversized)
    assert isinstance(decision, Ranking) and decision.reason == "best_effort"
    assert decision.endpoints[0].endpoint_id == "a"


def test_a_class_may_refuse_what_it_cannot_meet_instead() -> None:
    strict = SloClassConfig(ttft_ms=500, when_unmeetable="reject").target("strict")
    decision = decide([endpoint("a")], request(strict, prompt_tokens=10_000))
    assert isinstance(decision, Reject)
    assert (decision.status, decision.reason) == (503, Reason.UNMEETABLE)
    with pytest.raises(ValidationError):
        SloClassConfig.model_validate({"ttft_ms": 500, "when_unmeetable": "queue"})


def test_a_cold_endpoint_is_not_refused_on_its_prior_alone() -> None:
    # its cautious p95 (the prior, 3x uncertain) misses, its optimistic one meets: unproven
    cold = endpoint("cold", stats=LatencyEstimate())._replace(in_flight=2)
    decision = decide([endpoint("a", waiting=20), cold])
    assert isinstance(decision, Ranking) and decision.reason == "cold"
    assert decision.endpoints[0].endpoint_id == "cold"


def test_an_idle_endpoint_measured_slow_is_explored_rather_than_refused() -> None:
    # measured slow under a past load (TTFT 1 s), idle now, its prior meets: only serving
    # it shows whether that measure still holds, so the request goes there first
    stale = LatencyEstimate(
        samples=100, ttft_mean_s=1.0, prompt_tokens_mean=1000, ttft_ratio_n=100, ttft_ratio_p95=1.2
    )
    loaded = endpoint("a", waiting=3)  # p95 about 0.7 s: it misses, by less than stale's 1.2
    decision = decide([loaded, endpoint("stale", stats=stale)])
    assert isinstance(decision, Ranking) and decision.reason == "explore"
    assert decision.endpoints[0].endpoint_id == "stale"
    assert decision.predicted_ttft_p95_s == decision.predictions[0].ttft_p95_s


def test_a_policy_that_predicts_nothing_leaves_admission_to_the_thresholds() -> None:
    least = LeastLoaded(LeastLoadedParams())
    decision = decide([endpoint("a", waiting=20)], policy=least)
    assert isinstance(decision, Ranking) and decision.reason != "best_effort"


def test_the_least_served_key_of_its_class_is_not_refused_for_the_others_load() -> None:
    admission = control()
    seen = {"quiet": NOW_S - 1, "noisy": NOW_S - 1}
    admission.fair.shared["chat"] = Counters({"quiet": 1_000.0, "noisy": 50_000.0}, seen)
    loaded = [endpoint("a", waiting=20)]
    quiet = decide(loaded, request(tenant="quiet"), admission=admission)
    assert isinstance(quiet, Ranking)
    noisy = decide(loaded, request(tenant="noisy"), admission=admission)
    assert isinstance(noisy, Reject) and noisy.reason == Reason.OVERLOADED
    alone = control()  # the only active key: refused like any other
    alone.fair.shared["chat"] = Counters({"quiet": 1_000.0}, {"quiet": NOW_S - 1})
    assert isinstance(decide(loaded, request(tenant="quiet"), admission=alone), Reject)


def test_a_non_sheddable_request_is_spared_while_sheddable_ones_hold_the_load() -> None:
    admission = control()
    batch = SloTarget("batch", deadline_s=60.0, sheddable=True)
    first = request(batch, request_id="batch-1")
    assert isinstance(decide([endpoint("idle")], first, admission=admission), Ranking)
    loaded = [endpoint("a", waiting=20)]
    spared = decide(loaded, request(request_id="chat-1"), admission=admission)
    assert isinstance(spared, Ranking)  # the load is the batch's: it is not refused for it
    held = decide([endpoint("idle")], request(batch, request_id="batch-2"), admission=admission)
    assert isinstance(held, Reject) and held.status == 429  # meanwhile batch stays out
    admission.finished(first, NOW_S)
    refused = decide(loaded, request(request_id="chat-2"), admission=admission)
    assert isinstance(refused, Reject) and refused.reason == Reason.OVERLOADED
