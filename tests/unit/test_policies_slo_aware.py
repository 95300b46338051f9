"""slo_aware on fixed snapshots: which endpoint comes first, and when the SLO is at risk."""

from __future__ import annotations

import random
import statistics
from collections import deque
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.base import EndpointSnapshot, EngineSignals, LatencyEstimate, RouteRequest, SloTarget
from policies.estimate import EndpointPrior, EstimateParams, Prediction
from policies.slo_aware import Params, SloAware, binding, headroom

INTERACTIVE = SloTarget("interactive", ttft_s=0.5, priority=10)
STREAMING = SloTarget("streaming", ttft_s=1.0, tpot_s=0.05)
DEADLINE = SloTarget("deadline", deadline_s=5.0)
BATCH = SloTarget("batch", sheddable=True)
NO_EXPLORE = Params(explore_fraction=0.0)


def warm(base_s: float, per_token_s: float = 1e-4, tpot_s: float = 0.02) -> LatencyEstimate:
    """Measured: TTFT = base + per_token·P (p95 = 2× mean by the vLLM prior's spread)."""
    return LatencyEstimate(
        samples=100,
        ttft_mean_s=base_s,
        ttft_base_s=base_s,
        ttft_per_token_s=per_token_s,
        tpot_mean_s=tpot_s,
    )


def replica(
    endpoint_id: str, base_s: float = 0.05, *, waiting: float = 0, **latency: float
) -> EndpointSnapshot:
    """A free self-hosted replica with fresh engine gauges."""
    engine = EngineSignals(waiting=waiting, running=0, age_s=0.0)
    return EndpointSnapshot(endpoint_id, "vllm", engine=engine, latency=warm(base_s, **latency))


def provider(
    endpoint_id: str, price: float, *, base_s: float = 0.1, **latency: float
) -> EndpointSnapshot:
    """A hosted provider charging `price` per 1M input tokens and 4× that for output."""
    return EndpointSnapshot(
        endpoint_id,
        "openai",
        input_price_per_1m=price,
        output_price_per_1m=4 * price,
        latency=warm(base_s, **latency),
    )


def cold(
    endpoint_id: str, in_flight: int = 0, *, kind: str = "vllm", price: float = 0.0
) -> EndpointSnapshot:
    """No observations yet: judged by its kind's prior, widened by the cold uncertainty."""
    return EndpointSnapshot(
        endpoint_id,
        "vllm" if kind == "vllm" else "openai",
        in_flight=in_flight,
        max_concurrency=8,
        input_price_per_1m=price,
        output_price_per_1m=4 * price,
    )


def loaded(endpoint_id: str, in_flight: int, price: float = 0.0) -> EndpointSnapshot:
    """A warm replica whose measured TPOT grows by 5 ms per request in flight."""
    latency = LatencyEstimate(
        samples=100,
        ttft_mean_s=0.05,
        ttft_base_s=0.05,
        ttft_per_token_s=1e-4,
        tpot_mean_s=0.03,
        tpot_base_s=0.01,
        tpot_per_in_flight_s=0.005,
    )
    return EndpointSnapshot(
        endpoint_id,
        "vllm",
        in_flight=in_flight,
        max_concurrency=64,
        input_price_per_1m=price,
        output_price_per_1m=4 * price,
        latency=latency,
    )


@dataclass(frozen=True)
class Case:
    slo: SloTarget
    candidates: tuple[EndpointSnapshot, ...]
    first: str
    at_risk: bool = False
    prompt_tokens: int = 1000
    max_tokens: int = 100


# Low base latency but slow prefill, against higher base latency and fast prefill.
PREFILL_PAIR = (
    replica("quick-start", 0.02, per_token_s=2e-4),
    replica("fast-prefill", 0.1, per_token_s=2e-5),
)

CASES = {
    "the free replica meets the SLO: it beats a paid provider": Case(
        INTERACTIVE, (provider("cheap", 0.15), replica("gpu")), first="gpu"
    ),
    "among providers that meet the SLO, the cheapest": Case(
        INTERACTIVE, (provider("dear", 2.5), provider("cheap", 0.15)), first="cheap"
    ),
    "a long engine queue misses the SLO: spill to the paid provider": Case(
        INTERACTIVE, (replica("gpu", waiting=30), provider("cheap", 0.15)), first="cheap"
    ),
    "self-hosted first at equal cost, even with less headroom": Case(
        INTERACTIVE,
        (
            provider("hosted", 0.0, base_s=0.01),
            replica("gpu", base_s=0.1),
        ),
        first="gpu",
    ),
    "equal cost and kind: the most headroom": Case(
        INTERACTIVE, (replica("slow", base_s=0.15), replica("fast", base_s=0.02)), first="fast"
    ),
    "none meets: the best predicted, at risk": Case(
        SloTarget("strict", ttft_s=0.05),
        (replica("a", base_s=0.3), replica("b", base_s=0.2), provider("c", 0.15, base_s=0.9)),
        first="b",
        at_risk=True,
    ),
    "a short prompt goes where the base latency is lowest": Case(
        INTERACTIVE,
        PREFILL_PAIR,
        first="quick-start",
        prompt_tokens=100,
    ),
    "a long prompt goes to the fastest prefill": Case(
        SloTarget("long", ttft_s=1.0),
        PREFILL_PAIR,
        first="fast-prefill",
        prompt_tokens=8000,
    ),
    "a TPOT target rules out the cheaper slow decoder": Case(
        STREAMING,
        (provider("slow-decode", 0.15, tpot_s=0.1), provider("fast-decode", 2.5, tpot_s=0.02)),
        first="fast-decode",
    ),
    "a deadline counts every output token": Case(
        DEADLINE,
        (provider("cheap", 0.15, tpot_s=0.01), provider("dear", 2.5, tpot_s=0.002)),
        first="dear",
        max_tokens=1000,
    ),
    "a deadline with few output tokens: both meet, the cheaper": Case(
        DEADLINE,
        (provider("dear", 2.5, tpot_s=0.002), provider("cheap", 0.15, tpot_s=0.01)),
        first="cheap",
        max_tokens=100,
    ),
    "no targets (batch): the cheapest, however slow": Case(
        BATCH, (provider("hosted", 0.15), replica("gpu", waiting=30)), first="gpu"
    ),
    # TPOT p95 = (0.01 + 0.005·(I + 1))·1.6: 0.04 idle, 0.096 with 10 in flight (target 0.05)
    "a cheap replica whose TPOT degrades under load loses to a dear idle one": Case(
        STREAMING,
        (loaded("cheap-busy", 10, price=0.01), loaded("dear-idle", 0, price=1.0)),
        first="dear-idle",
    ),
    "the same cheap replica, lightly loaded, meets the SLO and wins": Case(
        STREAMING,
        (loaded("cheap-busy", 1, price=0.01), loaded("dear-idle", 0, price=1.0)),
        first="cheap-busy",
    ),
    # cold vLLM TPOT p95 = 3 × 0.02 × 1.6 ≈ 0.1 s > 0.05: not trusted until measured
    "a measured provider that meets the SLO beats a free replica nobody has measured": Case(
        STREAMING, (cold("unmeasured"), provider("measured", 0.15)), first="measured"
    ),
    "unproven endpoints share the load: the least utilised first, not the cheapest": Case(
        STREAMING,
        (cold("cheap", in_flight=3), cold("dear", in_flight=1, price=1.0)),
        first="dear",
        at_risk=True,
    ),
    "unproven before a measured miss": Case(
        STREAMING,
        (loaded("busy", 20), cold("unmeasured", in_flight=6)),
        first="unmeasured",
        at_risk=True,
    ),
    "a lenient SLO trusts a cold replica even at its cautious p95": Case(
        DEADLINE,
        (provider("hosted", 0.15), cold("unmeasured", in_flight=3)),
        first="unmeasured",
        max_tokens=20,
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_first_choice(case: Case) -> None:
    request = RouteRequest(
        "r", "m", "t", case.slo, prompt_tokens=case.prompt_tokens, max_tokens=case.max_tokens
    )
    ranking = SloAware(NO_EXPLORE).rank(request, case.candidates, random.Random(0))
    assert ranking.endpoints[0].endpoint_id == case.first
    assert ranking.at_risk is case.at_risk
    cold = ranking.endpoints[0].latency.samples < NO_EXPLORE.estimate.min_samples
    expected = "slo_met" if not case.at_risk else "cold" if cold else "slo_at_risk"
    assert ranking.reason == expected


def test_failover_order_puts_every_meeting_endpoint_before_the_misses() -> None:
    candidates = (
        replica("miss-1", waiting=40),
        provider("meet-dear", 2.5),
        replica("miss-2", waiting=60),
        replica("meet-free"),
    )
    request = RouteRequest("r", "m", "t", INTERACTIVE, prompt_tokens=1000, max_tokens=100)
    ranking = SloAware(NO_EXPLORE).rank(request, candidates, random.Random(0))
    assert [e.endpoint_id for e in ranking.endpoints] == [
        "meet-free",
        "meet-dear",
        "miss-1",
        "miss-2",
    ]


def test_when_every_endpoint_misses_the_best_predicted_within_the_load_bound_goes_first() -> None:
    """In overload the predictions trail the load: the best predicted endpoint past the bound
    (1.25 x the mean in flight + 1) ranks after the others, which keep their order."""
    best, good, worse = (
        replica("best", waiting=40),
        replica("good", waiting=50),
        replica("worse", waiting=60),
    )
    request = RouteRequest("r", "m", "t", INTERACTIVE, prompt_tokens=1000, max_tokens=100)
    policy = SloAware(NO_EXPLORE)

    def order(*in_flight: int) -> list[str]:
        loaded = [
            e._replace(in_flight=n) for e, n in zip((best, good, worse), in_flight, strict=True)
        ]
        ranking = policy.rank(request, loaded, random.Random(0))
        assert ranking.reason == "slo_at_risk"
        return [e.endpoint_id for e in ranking.endpoints]

    assert order(4, 4, 4) == ["best", "good", "worse"]
    assert order(9, 2, 1) == ["good", "worse", "best"]  # bound: 1.25 x 4 + 1 = 6


def test_reports_the_prediction_for_the_first_endpoint() -> None:
    request = RouteRequest("r", "m", "t", INTERACTIVE, prompt_tokens=1000, max_tokens=100)
    ranking = SloAware(NO_EXPLORE).rank(request, [replica("gpu", base_s=0.1)], random.Random(0))
    # TTFT = 0.1 + 1e-4·1000, p95 = 2× (the vLLM prior's spread)
    assert ranking.predicted_ttft_s == pytest.approx(0.2)
    assert ranking.predicted_ttft_p95_s == pytest.approx(0.4)


def test_failover_order_is_meets_then_unproven_then_misses() -> None:
    candidates = (
        loaded("miss", 20),
        cold("unproven-busy", in_flight=4),
        provider("meet", 0.15),
        cold("unproven-idle"),
    )
    request = RouteRequest("r", "m", "t", STREAMING, prompt_tokens=1000, max_tokens=100)
    ranking = SloAware(NO_EXPLORE).rank(request, candidates, random.Random(0))
    assert [e.endpoint_id for e in ranking.endpoints] == [
        "meet",
        "unproven-idle",
        "unproven-busy",
        "miss",
    ]


@pytest.mark.parametrize(
    ("slo", "ttft_p95_s", "tpot_p95_s", "expected"),
    [
        (INTERACTIVE, 0.25, 0.5, 0.5),  # only TTFT is judged
        (INTERACTIVE, 0.75, 0.0, -0.5),
        (STREAMING, 0.5, 0.04, 0.2),  # the tighter of 1 − 0.5/1 and 1 − 0.04/0.05
        (DEADLINE, 1.0, 0.01, 1 - (1.0 + 0.01 * 100) / 5.0),
        (BATCH, 100.0, 1.0, float("inf")),
    ],
)
def test_headroom_is_the_tightest_fraction_of_the_slo_left(
    slo: SloTarget, ttft_p95_s: float, tpot_p95_s: float, expected: float
) -> None:
    prediction = Prediction(0.0, ttft_p95_s, 0.0, tpot_p95_s, 100, 0.0, False)
    assert headroom(slo, prediction) == pytest.approx(expected)


def cold_and_warm() -> tuple[EndpointSnapshot, ...]:
    return (replica("w1"), replica("w2"), cold("cold", kind="openai", price=5.0))


def test_a_cold_endpoint_gets_a_small_exploration_share() -> None:
    policy = SloAware(Params(explore_fraction=0.05))
    request = RouteRequest("r", "m", "t", INTERACTIVE, prompt_tokens=1000, max_tokens=100)
    firsts = [
        policy.rank(request, cold_and_warm(), random.Random(seed)).endpoints[0].endpoint_id
        for seed in range(2000)
    ]
    share = firsts.count("cold") / len(firsts)
    assert 0.02 < share < 0.09


@pytest.mark.parametrize(("fraction", "explores"), [(0.0, False), (1.0, True)])
def test_exploration_follows_its_fraction(fraction: float, explores: bool) -> None:
    request = RouteRequest("r", "m", "t", INTERACTIVE, prompt_tokens=1000, max_tokens=100)
    ranking = SloAware(Params(explore_fraction=fraction)).rank(
        request, cold_and_warm(), random.Random(1)
    )
    assert (ranking.endpoints[0].endpoint_id == "cold") is explores
    assert (ranking.reason == "explore") is explores
    assert len(ranking.endpoints) == 3


def closed_loop_shares(
    policy: SloAware, request: RouteRequest, in_flight: int, requests: int
) -> list[int]:
    """Requests each of four identical replicas takes: `in_flight` kept in flight, the oldest
    finishing first; an endpoint given the prompt holds it (the prefix index's view)."""
    ids = ["r0", "r1", "r2", "r3"]
    rng, loads, holders = random.Random(7), dict.fromkeys(ids, 0), set[str]()
    flying: deque[str] = deque()
    served = dict.fromkeys(ids, 0)
    for _ in range(requests):
        if len(flying) == in_flight:
            loads[flying.popleft()] -= 1
        snapshots = [replica(i)._replace(in_flight=loads[i]) for i in ids]
        cached = {i: float(request.prompt_tokens) for i in holders}
        first = policy.rank(request._replace(cached_tokens=cached), snapshots, rng).endpoints[0]
        chosen = first.endpoint_id
        holders.add(chosen)
        loads[chosen] += 1
        served[chosen] += 1
        flying.append(chosen)
    return list(served.values())


@pytest.mark.parametrize("session", [None, "s1"])
def test_identical_replicas_share_one_repeated_prompt_within_15_percent(
    session: str | None,
) -> None:
    """The first to take a prompt holds it (or is the session's home), yet past the load bound
    the next takes it too: the cache preference never concentrates a closed loop's load."""
    request = RouteRequest("r", "m", "t", INTERACTIVE, prompt_tokens=20, session=session)
    served = closed_loop_shares(SloAware(NO_EXPLORE), request, in_flight=64, requests=4000)
    assert max(served) / statistics.mean(served) <= 1.15, served


def test_a_replica_seeded_with_a_measured_prior_is_trusted_before_it_is_measured() -> None:
    measured = EndpointPrior(tpot_s=0.012, uncertainty=1.2)  # p95 1.2 × 1.6 × 0.012 ≈ 0.023
    estimate = EstimateParams(endpoint_priors={"seeded": measured})
    candidates = (provider("measured", 0.15), cold("seeded"))
    request = RouteRequest("r", "m", "t", STREAMING, prompt_tokens=1000, max_tokens=100)
    for params, first in (
        (NO_EXPLORE, "measured"),
        (Params(explore_fraction=0.0, estimate=estimate), "seeded"),
    ):
        ranking = SloAware(params).rank(request, candidates, random.Random(0))
        assert (ranking.endpoints[0].endpoint_id, ranking.reason) == (first, "slo_met")


def test_a_request_with_little_headroom_on_self_hosted_spills_to_a_comfortable_provider() -> None:
    tight = replica("tight", base_s=0.125)  # p95 0.45 s of a 0.5 s target: 10% headroom
    roomy = provider("roomy", 2.5, base_s=0.02, per_token_s=2e-5)  # p95 0.1 s
    request = RouteRequest("r", "m", "t", INTERACTIVE, prompt_tokens=1000, max_tokens=100)
    ranking = SloAware(NO_EXPLORE).rank(request, [tight, roomy], random.Random(0))
    assert [e.endpoint_id for e in ranking.endpoints] == ["roomy", "tight"]
    assert ranking.reason == "slo_met"
    cheapest_first = Params(explore_fraction=0.0, spill_margin=0.0)
    ranking = SloAware(cheapest_first).rank(request, [tight, roomy], random.Random(0))
    assert ranking.endpoints[0].endpoint_id == "tight"
    short = RouteRequest("r", "m", "t", INTERACTIVE, prompt_tokens=100, max_tokens=100)
    ranking = SloAware(NO_EXPLORE).rank(
        request=short, candidates=[tight, roomy], rng=random.Random(0)
    )
    assert ranking.endpoints[0].endpoint_id == "tight"  # p95 0.27 s: room enough, the cheapest


def test_a_burst_on_cold_engines_goes_to_the_idle_one_then_spills_to_a_measured_provider() -> None:
    """sessions_rag's first seconds: long first turns arrive before any engine has answered.
    Each cold engine's prior looks fast enough (p95 (0.05 + 1e-4 x 2,000) x 3 x 2 = 1.5 s of
    2.5 s); the prefill already sent there (two 2,000-token prompts: +0.4 s, p95 +2.4 s) is not."""
    rag = SloTarget("rag", ttft_s=2.5)
    request = RouteRequest("r", "m", "t", rag, prompt_tokens=2000, max_tokens=100)
    hosted = provider("hosted", 3.0, base_s=0.3, per_token_s=1e-5)
    busy, idle = cold("busy")._replace(prefill_tokens=4000), cold("idle")
    ranking = SloAware(NO_EXPLORE).rank(request, [busy, idle, hosted], random.Random(0))
    assert [e.endpoint_id for e in ranking.endpoints] == ["idle", "hosted", "busy"]
    both = [busy, idle._replace(prefill_tokens=4000), hosted]
    ranking = SloAware(NO_EXPLORE).rank(request, both, random.Random(0))
    assert (ranking.endpoints[0].endpoint_id, ranking.reason) == ("hosted", "slo_met")


@settings(max_examples=200, deadline=None)
@given(
    st.none() | st.floats(0.05, 5.0),
    st.none() | st.sampled_from([0.0, 0.02, 0.1]),
    st.none() | st.sampled_from([0.0, 3.0, 30.0]),
    st.floats(0.0, 10.0),
    st.floats(0.0, 0.2),
)
def test_binding_short_cut_equals_the_largest_ratio(
    ttft_s: float | None,
    tpot_s: float | None,
    deadline_s: float | None,
    ttft_p95_s: float,
    tpot_p95_s: float,
) -> None:
    """`binding` skips the ratios when only a TTFT target is set: the same as taking the
    largest p95/target ratio over the targets the class sets."""
    slo = SloTarget("c", ttft_s=ttft_s, tpot_s=tpot_s, deadline_s=deadline_s)
    prediction = Prediction(0.0, ttft_p95_s, 0.0, tpot_p95_s, 100, 0.0, False)
    judged = (
        ("ttft", prediction.ttft_p95_s, ttft_s),
        ("tpot", prediction.tpot_p95_s, tpot_s),
        ("deadline", prediction.e2e_p95_s, deadline_s),
    )
    ratios = [(p95 / target, name, p95, target) for name, p95, target in judged if target]
    expected = max(ratios)[1:] if ratios else ("", None, None)
    assert binding(slo, prediction) == expected


def test_a_request_that_does_not_stream_is_predicted_by_its_whole_answer() -> None:
    # warm: TTFT p95 ≈ 2 x 0.15 s, TPOT p95 = 1.6 x 0.02 s; 21 tokens ≈ 0.3 + 20 x 0.032 s
    streaming = RouteRequest("r", "m", "t", STREAMING, prompt_tokens=1000, max_tokens=21)
    whole = streaming._replace(stream=False)
    rank = SloAware(NO_EXPLORE).rank
    streamed = rank(streaming, [replica("gpu")], random.Random(0))
    answered = rank(whole, [replica("gpu")], random.Random(0))
    assert streamed.binding == "tpot" and answered.binding == "e2e"
    assert answered.binding_target_s == pytest.approx(1.0 + 0.05 * 20)
    assert answered.binding_p95_s == pytest.approx(0.3 + 0.032 * 20, rel=0.05)
    assert answered.reason == "slo_met" and not answered.at_risk
    # with the TTFT target alone the same answer is honestly at risk: it cannot arrive in 0.5 s
    short = rank(whole._replace(slo=INTERACTIVE), [replica("gpu")], random.Random(0))
    assert short.at_risk and short.binding_target_s == pytest.approx(0.5)


def test_an_embedding_is_predicted_by_its_first_token() -> None:
    embedding = RouteRequest("r", "m", "t", INTERACTIVE, 1000, max_tokens=0, stream=False)
    ranking = SloAware(NO_EXPLORE).rank(embedding, [replica("gpu")], random.Random(0))
    assert ranking.binding == "e2e" and ranking.binding_p95_s == ranking.predicted_ttft_p95_s
    assert not ranking.at_risk
