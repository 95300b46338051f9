"""The calibrated p95: outcomes measured against their predicted means (gateway/state/window.py)
and the estimate's p95 taken from that distribution (policies/estimate.py)."""

from __future__ import annotations

import random

import pytest

from gateway.state.memory_store import MemoryStatsStore
from gateway.state.store import LatencySample
from policies.base import EndpointSnapshot, LatencyEstimate, RouteRequest, SloTarget
from policies.estimate import EstimateParams, Estimator
from policies.step_change import Step, jumped

T0 = 1_000_000.0
REQUEST = RouteRequest("r", "m", "t", SloTarget("interactive", ttft_s=1.0), prompt_tokens=500)
WARM = dict(
    samples=100, ttft_mean_s=0.2, ttft_base_s=0.2, ttft_per_token_s=0.0, tpot_mean_s=0.02,
    tpot_base_s=0.02, tpot_per_in_flight_s=0.0, prompt_tokens_mean=500.0,
)  # fmt: skip


def outcome(at_s: float, predicted_s: float, ratio: float) -> LatencySample:
    """A whole request predicted at `predicted_s` (TTFT) and predicted_s / 10 (TPOT) that took
    `ratio` times that."""
    return LatencySample(
        at_s, True, 200, 500, 20, predicted_s * ratio, predicted_s * ratio / 10, 1.0,
        ttft_predicted_s=predicted_s, tpot_predicted_s=predicted_s / 10,
    )  # fmt: skip


async def learned(ratios: list[float], at_s: float = T0) -> LatencyEstimate:
    store = MemoryStatsStore(window_s=60, bucket_s=5)
    rng = random.Random(1)
    for i, ratio in enumerate(ratios):
        await store.observe("a", outcome(at_s + i * 0.01, rng.uniform(0.05, 2.0), ratio))
    return (await store.read(["a"], now=at_s + 1))["a"].latency


DEFAULTS = EstimateParams()


def p95_over_mean(stats: LatencyEstimate, params: EstimateParams = DEFAULTS) -> float:
    prediction = Estimator(params).predict(REQUEST, EndpointSnapshot("a", "vllm", latency=stats))
    return prediction.ttft_p95_s / prediction.ttft_mean_s


async def test_the_learned_p95_covers_95_percent_of_fresh_outcomes() -> None:
    rng = random.Random(7)
    noise = [rng.lognormvariate(0.0, 0.4) for _ in range(400)]
    stats = await learned(noise)
    assert stats.ttft_ratio_n == stats.tpot_ratio_n == 400
    scale = p95_over_mean(stats)
    fresh = [rng.lognormvariate(0.0, 0.4) for _ in range(4000)]
    coverage = sum(r <= scale for r in fresh) / len(fresh)
    assert 0.92 <= coverage <= 0.98
    assert stats.tpot_ratio_p95 == pytest.approx(stats.ttft_ratio_p95, rel=1e-9)


async def test_a_steady_endpoint_gets_a_narrower_p95_than_the_prior() -> None:
    stats = await learned([1.0 + 0.01 * (i % 10) for i in range(100)])
    # the true p95 (1.09), rounded up by at most one histogram bucket (19%)
    assert stats.ttft_ratio_p95 is not None and 1.09 <= stats.ttft_ratio_p95 <= 1.19
    assert p95_over_mean(stats) == pytest.approx(stats.ttft_ratio_p95)
    assert p95_over_mean(LatencyEstimate(**WARM)) == pytest.approx(2.0)  # the prior's spread


async def test_cold_starts_at_the_priors_spread_times_uncertainty_and_warms_by_count() -> None:
    cold = LatencyEstimate()
    assert p95_over_mean(cold) == pytest.approx(3.0 * 2.0)  # cold_uncertainty x ttft_spread
    params = EstimateParams(calibration_samples=40)
    measured = [
        p95_over_mean(LatencyEstimate(**WARM, ttft_ratio_n=n, ttft_ratio_p95=1.2), params)
        for n in (0, 10, 20, 40, 400)
    ]
    assert measured == pytest.approx([2.0, 1.8, 1.6, 1.2, 1.2])


async def test_old_deviations_decay() -> None:
    store = MemoryStatsStore(window_s=60, bucket_s=5)
    for i in range(10):
        await store.observe("a", outcome(T0 + i * 0.1, 0.2, 4.0))  # wild, 45 s ago
    for i in range(100):
        await store.observe("a", outcome(T0 + 45 + i * 0.01, 0.2, 1.1))  # steady, now
    # 9% of the outcomes are wild, but at a weight of 0.5 ** (45 / 15) they are 1.2% of the mass
    now = (await store.read(["a"], now=T0 + 46))["a"].latency
    assert now.ttft_ratio_n == 110
    assert now.ttft_ratio_p95 == pytest.approx(1.1, rel=0.1)


async def test_samples_without_a_prediction_teach_no_ratio() -> None:
    store = MemoryStatsStore()
    await store.observe("a", LatencySample(T0, True, 200, 500, 20, 0.3, 0.02, 1.0))
    stats = (await store.read(["a"], now=T0 + 1))["a"].latency
    assert stats.samples == 1 and stats.ttft_ratio_n == 0 and stats.ttft_ratio_p95 is None


def test_a_step_resets_the_measured_p95_of_what_it_scales() -> None:
    stats = LatencyEstimate(**WARM, ttft_ratio_n=100, ttft_ratio_p95=1.2, tpot_ratio_n=100,
                            tpot_ratio_p95=1.1)  # fmt: skip
    tpot_step = jumped(stats, Step(2.0, "tpot", T0, T0))
    assert (tpot_step.tpot_ratio_n, tpot_step.ttft_ratio_n) == (0, 100)
    ttft_step = jumped(stats, Step(2.0, "ttft", T0, T0))
    assert (ttft_step.tpot_ratio_n, ttft_step.ttft_ratio_n) == (100, 0)
    assert p95_over_mean(ttft_step) == pytest.approx(2.0)  # back to the prior's spread
