"""The baseline policies on fixed snapshots: power_of_two, latency_ewma, cost_first."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from policies import cost_first, latency_ewma, power_of_two
from policies.base import EndpointSnapshot, EngineSignals, LatencyEstimate, RouteRequest, SloTarget

REQUEST = RouteRequest(
    "r", "m", "t", SloTarget("chat"), prompt_tokens=1000, max_tokens=100, stream=False
)
STREAMING = RouteRequest(
    "r", "m", "t", SloTarget("chat"), prompt_tokens=1000, max_tokens=100, stream=True
)


def loaded(endpoint_id: str, in_flight: int, waiting: float | None = None) -> EndpointSnapshot:
    engine = EngineSignals(waiting=waiting, age_s=0.0) if waiting is not None else None
    return EndpointSnapshot(endpoint_id, "vllm", in_flight=in_flight, engine=engine)


def ids(endpoints: tuple[EndpointSnapshot, ...]) -> list[str]:
    return [e.endpoint_id for e in endpoints]


class TestPowerOfTwo:
    policy = power_of_two.PowerOfTwo(power_of_two.Params())

    def test_of_two_candidates_the_less_loaded_goes_first(self) -> None:
        pair = [loaded("busy", 9), loaded("idle", 1)]
        for seed in range(50):
            ranking = self.policy.rank(REQUEST, pair, random.Random(seed))
            assert ids(ranking.endpoints) == ["idle", "busy"]

    def test_the_most_loaded_of_three_never_goes_first(self) -> None:
        fleet = [loaded("a", 1), loaded("b", 5), loaded("worst", 5, waiting=20)]
        firsts = Counter(
            self.policy.rank(REQUEST, fleet, random.Random(seed)).endpoints[0].endpoint_id
            for seed in range(300)
        )
        assert firsts["worst"] == 0
        # "b" wins when the sample is {b, worst}: about a third of the time
        assert 50 < firsts["b"] < 150

    def test_the_rest_follow_least_loaded_first(self) -> None:
        fleet = [loaded(f"e{n}", n) for n in (7, 3, 9, 1, 5)]
        ranking = self.policy.rank(REQUEST, fleet, random.Random(4))
        rest = [e.in_flight for e in ranking.endpoints[2:]]
        assert rest == sorted(rest)
        assert ranking.endpoints[0].in_flight <= ranking.endpoints[1].in_flight


def measured(endpoint_id: str, ttft_s: float | None, e2e_s: float | None) -> EndpointSnapshot:
    samples = 0 if ttft_s is None and e2e_s is None else 10
    latency = LatencyEstimate(samples=samples, ttft_mean_s=ttft_s, e2e_mean_s=e2e_s)
    return EndpointSnapshot(endpoint_id, "openai", latency=latency)


class TestLatencyEwma:
    fleet = (
        measured("fast-first-token", 0.1, 9.0),
        measured("fast-overall", 0.4, 2.0),
        measured("slow", 0.8, 6.0),
    )

    @pytest.mark.parametrize(
        ("request_", "expected"),
        [
            (STREAMING, ["fast-first-token", "fast-overall", "slow"]),  # by mean TTFT
            (REQUEST, ["fast-overall", "slow", "fast-first-token"]),  # by mean end-to-end
        ],
    )
    def test_orders_by_recent_mean_latency(
        self, request_: RouteRequest, expected: list[str]
    ) -> None:
        policy = latency_ewma.LatencyEwma(latency_ewma.Params())
        assert ids(policy.rank(request_, self.fleet, random.Random(0)).endpoints) == expected

    def test_unseen_endpoints_are_tried_first(self) -> None:
        policy = latency_ewma.LatencyEwma(latency_ewma.Params())
        fleet = (*self.fleet, measured("new", None, None))
        assert policy.rank(REQUEST, fleet, random.Random(0)).endpoints[0].endpoint_id == "new"

    def test_endpoints_within_the_buffer_share_traffic(self) -> None:
        policy = latency_ewma.LatencyEwma(latency_ewma.Params(buffer_fraction=0.5))
        fleet = (measured("a", 0.10, None), measured("b", 0.14, None), measured("c", 0.2, None))
        firsts = Counter(
            policy.rank(STREAMING, fleet, random.Random(seed)).endpoints[0].endpoint_id
            for seed in range(200)
        )
        assert set(firsts) == {"a", "b"}
        assert min(firsts.values()) > 50


class TestCostFirst:
    policy = cost_first.CostFirst(cost_first.Params())

    def test_cheapest_first_then_by_load(self) -> None:
        fleet = [
            EndpointSnapshot("dear", "openai", input_price_per_1m=2.5, output_price_per_1m=10),
            EndpointSnapshot("cheap", "openai", input_price_per_1m=0.15, output_price_per_1m=0.6),
            EndpointSnapshot("gpu-busy", "vllm", in_flight=12),
            EndpointSnapshot("gpu-idle", "vllm", in_flight=2),
        ]
        ranking = self.policy.rank(REQUEST, fleet, random.Random(0))
        assert ids(ranking.endpoints) == ["gpu-idle", "gpu-busy", "cheap", "dear"]

    def test_output_price_counts_with_max_tokens(self) -> None:
        # cheap input, dear output vs the reverse: 1000 in / 2000 out favours cheap output
        fleet = [
            EndpointSnapshot("cheap-in", "openai", input_price_per_1m=0.1, output_price_per_1m=10),
            EndpointSnapshot("cheap-out", "openai", input_price_per_1m=3, output_price_per_1m=1),
        ]
        long_answer = RouteRequest(
            "r", "m", "t", SloTarget("chat"), prompt_tokens=1000, max_tokens=2000
        )
        ranking = self.policy.rank(long_answer, fleet, random.Random(0))
        assert ranking.endpoints[0].endpoint_id == "cheap-out"
