"""Prediction with the prefix cache: TTFT charges uncached tokens; the fit learns on them."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

from gateway.core.outcomes import Outcomes
from gateway.core.progress import StreamProgress
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.store import LatencySample
from gateway.telemetry.record import Finished
from policies.base import EndpointSnapshot, LatencyEstimate, RouteRequest, SloTarget
from policies.estimate import EstimateParams, Estimator
from policies.slo_aware import Params, SloAware

WARM = LatencyEstimate(samples=100, ttft_mean_s=0.3, ttft_base_s=0.05, ttft_per_token_s=2e-4)
A, B = 0.05, 2e-4  # the engine's true TTFT: a + b · uncached tokens


def request(prompt: int, cached: dict[str, float] | None = None) -> RouteRequest:
    slo = SloTarget("chat", ttft_s=1.0)
    return RouteRequest("r", "m", "t", slo, prompt, cached_tokens=cached or {})


def test_ttft_charges_only_uncached_tokens_and_the_p95_counts_the_predicted_hit() -> None:
    snapshot = EndpointSnapshot("e", "vllm", latency=WARM)
    for hit_share in (EstimateParams().prefix_p95_hit_share, 0.7):
        estimator = Estimator(EstimateParams(prefix_p95_hit_share=hit_share))
        cold = estimator.predict(request(4000), snapshot)
        warm = estimator.predict(request(4000, {"e": 3000.0}), snapshot)
        assert abs(cold.ttft_mean_s - warm.ttft_mean_s - B * 3000) < 1e-9
        ratio = (cold.ttft_p95_s - warm.ttft_p95_s) / (cold.ttft_mean_s - warm.ttft_mean_s)
        spread = cold.ttft_p95_s / cold.ttft_mean_s
        assert abs(ratio - hit_share * spread) < 1e-6  # the p95 counts on h of the hit


def test_a_free_holder_of_a_long_prefix_keeps_it_from_a_priced_provider() -> None:
    holder = EndpointSnapshot("holder", "vllm", latency=WARM)  # p95 (0.05 + 0.2) × 2 = 0.5 s
    fast = LatencyEstimate(samples=100, ttft_mean_s=0.2, ttft_base_s=0.1, ttft_per_token_s=1e-5)
    provider = EndpointSnapshot("provider", "openai", input_price_per_1m=1.0, latency=fast)
    turn = request(8000, {"holder": 7000.0})  # a later turn: 7,000 tokens cached on the holder
    # at h = 0.7 the p95 charges 2,100 written-off hits: (0.25 + 0.42) × 2 = 1.34 s misses 1 s
    for overrides, first in (({}, "holder"), ({"prefix_p95_hit_share": 0.7}, "provider")):
        estimate = EstimateParams(**overrides)
        policy = SloAware(Params(explore_fraction=0, estimate=estimate))
        ranking = policy.rank(turn, [provider, holder], random.Random(1))
        assert ranking.endpoints[0].endpoint_id == first


def test_hosted_cached_input_is_priced_at_the_cached_rate() -> None:
    snapshot = EndpointSnapshot(
        "p", "openai", input_price_per_1m=2.0, cached_input_price_per_1m=0.5
    )
    assert snapshot.cost(1_000_000, 0) == 2.0
    assert snapshot.cost(1_000_000, 0, cached_tokens=800_000) == 0.2 * 2.0 + 0.8 * 0.5
    policy = SloAware(Params(explore_fraction=0))
    dear = EndpointSnapshot("dear", "openai", input_price_per_1m=1.0, latency=WARM)
    cached = snapshot._replace(latency=WARM)
    ranking = policy.rank(request(8000, {"p": 8000.0}), [dear, cached], random.Random(1))
    assert ranking.endpoints[0].endpoint_id == "p"  # dearer list price, cheaper with its cache


def observed_slope(record_uncached: bool) -> float:
    """The store's TTFT slope after a mix of cold and warm requests on one engine."""
    store = MemoryStatsStore()
    rng = random.Random(3)
    for i in range(200):
        prompt = rng.randint(500, 4000)
        cached = rng.choice([0, prompt - 200])
        ttft = A + B * (prompt - cached)
        recorded = prompt - cached if record_uncached else prompt
        sample = LatencySample(200.0 + i * 0.1, True, 200, recorded, 10, ttft, 0.02, ttft + 0.2)
        asyncio.run(store.observe("e", sample))
    stats = asyncio.run(store.read(["e"], now=221.0))["e"]
    assert stats.latency.ttft_per_token_s is not None
    return stats.latency.ttft_per_token_s


def test_fit_on_uncached_tokens_is_not_biased_by_hits() -> None:
    assert abs(observed_slope(record_uncached=True) - B) / B < 0.05
    assert observed_slope(record_uncached=False) < 0.6 * B  # what counting hits would learn


def test_outcomes_record_uncached_prompt_tokens() -> None:
    store = MemoryStatsStore()
    seen: list[Any] = []
    healthy = SimpleNamespace(breaker=SimpleNamespace(failures=0))
    view = SimpleNamespace(store=store, stats=lambda _: healthy)
    leases = SimpleNamespace(
        in_flight_when_taken=lambda *_: 1, drop=lambda *_: None, predicted=lambda *_: None
    )
    outcomes = Outcomes(leases, None, None, view, seen.append)  # type: ignore[arg-type]
    result = Finished("ok", 200, 4000, 10, 0.3, 0.02, 0.5, cached_tokens=3000)
    outcomes.finished("e", request(4000), result, None, now=100.0)
    asyncio.run(seen[0])
    stats = asyncio.run(store.read(["e"], now=100.0))["e"]
    assert stats.latency.prompt_tokens_mean == 1000


def test_a_first_token_is_fitted_on_the_uncached_tokens_the_index_predicted() -> None:
    """Mid-stream the engine has not said what it found cached (usage comes at the end): the
    first token's TTFT is fitted on the prompt less the index's prediction for the endpoint."""
    store = MemoryStatsStore()
    seen: list[Any] = []
    healthy = SimpleNamespace(breaker=SimpleNamespace(failures=0))
    view = SimpleNamespace(
        store=store, stats=lambda _: healthy, shared=lambda _: None, in_flight=lambda *_: 1
    )
    leases = SimpleNamespace(first_token=lambda *_: None, predicted=lambda *_: None)
    outcomes = Outcomes(leases, None, None, view, seen.append)  # type: ignore[arg-type]
    progress = StreamProgress()
    predicted = request(4000, {"e": 3000.0, "other": 500.0})
    outcomes.streamed("e", predicted, progress, 1, 0.3, last_s=0.3, now=100.0)
    outcomes.streamed("f", request(4000), StreamProgress(), 1, 0.3, last_s=0.3, now=100.0)
    for pending in seen:
        asyncio.run(pending)
    stats = asyncio.run(store.read(["e", "f"], now=100.0))
    assert stats["e"].latency.prompt_tokens_mean == 1000
    assert stats["f"].latency.prompt_tokens_mean == 4000  # nothing predicted: the whole prompt
