"""Rolling estimates: the TTFT/TPOT fits, quantiles, counts, decay, merging across clients."""

from __future__ import annotations

import pytest

from gateway.state.memory_store import MemoryStatsStore
from gateway.state.store import EndpointStats, LatencySample, StatsStore
from policies.base import LatencyEstimate
from tests.contract.conftest import StoreClients, landed

T0 = 1_000_000.0  # a bucket boundary


def sample(
    at_s: float,
    *,
    prompt_tokens: int = 100,
    ttft_s: float | None = 0.1,
    tpot_s: float | None = 0.02,
    status: int = 200,
    in_flight: int = 0,
) -> LatencySample:
    return LatencySample(
        at_s=at_s,
        ok=status == 200,
        status=status,
        prompt_tokens=prompt_tokens,
        output_tokens=50,
        ttft_s=ttft_s if status == 200 else None,
        tpot_s=tpot_s if status == 200 else None,
        e2e_s=1.5 if status == 200 else 0.2,
        in_flight=in_flight,
    )


async def latency(store: StatsStore, now: float, endpoint_id: str = "a") -> LatencyEstimate:
    await landed(store)
    return (await store.read([endpoint_id], now=now))[endpoint_id].latency


async def test_fit_recovers_a_linear_ttft_from_varied_prompts(store: StatsStore) -> None:
    for i in range(20):
        prompt = 100 * (i + 1)
        await store.observe("a", sample(T0 + i, prompt_tokens=prompt, ttft_s=0.05 + 1e-4 * prompt))
    est = await latency(store, T0 + 20)
    assert est.samples == 20
    assert est.ttft_base_s == pytest.approx(0.05, rel=1e-6)
    assert est.ttft_per_token_s == pytest.approx(1e-4, rel=1e-6)
    assert est.prompt_tokens_mean is not None and 100 < est.prompt_tokens_mean < 2000


async def test_fit_falls_back_to_the_mean_when_prompt_lengths_do_not_vary(
    store: StatsStore,
) -> None:
    for i, ttft in enumerate([0.1, 0.2, 0.3, 0.2]):
        await store.observe("a", sample(T0 + i, prompt_tokens=500 + i, ttft_s=ttft))
    est = await latency(store, T0 + 4)
    assert est.ttft_per_token_s == 0.0
    assert est.ttft_base_s == pytest.approx(est.ttft_mean_s)


async def test_fit_never_reports_a_negative_slope(store: StatsStore) -> None:
    for i in range(10):
        prompt = 200 * (i + 1)
        await store.observe("a", sample(T0 + i, prompt_tokens=prompt, ttft_s=1.0 - 1e-4 * prompt))
    est = await latency(store, T0 + 10)
    assert est.ttft_per_token_s == 0.0
    assert est.ttft_base_s == pytest.approx(est.ttft_mean_s)


async def test_fit_with_a_negative_intercept_goes_through_the_origin(store: StatsStore) -> None:
    for i in range(10):
        prompt = 1000 + 100 * i
        await store.observe("a", sample(T0 + i, prompt_tokens=prompt, ttft_s=1e-4 * prompt - 0.05))
    est = await latency(store, T0 + 10)
    assert est.ttft_base_s == 0.0
    assert est.ttft_per_token_s is not None
    assert est.ttft_per_token_s * 1500 == pytest.approx(0.1, rel=0.2)


async def test_tpot_is_fitted_against_in_flight_requests(store: StatsStore) -> None:
    for c in range(1, 21):
        await store.observe("a", sample(T0 + c * 0.1, tpot_s=0.01 + 0.002 * c, in_flight=c))
    est = await latency(store, T0 + 3)
    assert est.tpot_base_s == pytest.approx(0.01, rel=1e-6)
    assert est.tpot_per_in_flight_s == pytest.approx(0.002, rel=1e-6)


async def test_quantiles_come_from_mergeable_histograms(store: StatsStore) -> None:
    for i in range(1, 101):
        await store.observe("a", sample(T0 + i * 0.01, ttft_s=i / 100, tpot_s=i / 1000))
    est = await latency(store, T0 + 2)
    assert est.ttft_p50_s == pytest.approx(0.5, rel=0.1)
    assert est.ttft_p95_s == pytest.approx(0.95, rel=0.1)
    assert est.tpot_p50_s == pytest.approx(0.05, rel=0.1)
    assert est.tpot_p95_s == pytest.approx(0.095, rel=0.1)


async def test_errors_and_throttles_are_counted_but_do_not_skew_latency(
    store: StatsStore,
) -> None:
    for i in range(10):
        await store.observe("a", sample(T0 + i * 0.1, ttft_s=0.1))
    for status in (500, 502, 0, 429, 429):
        await store.observe("a", sample(T0 + 1.5, status=status))
    est = await latency(store, T0 + 2)
    assert (est.samples, est.errors, est.throttled) == (15, 5, 2)
    assert est.ttft_mean_s == pytest.approx(0.1)
    assert est.e2e_mean_s == pytest.approx(1.5)
    assert est.error_rate == pytest.approx(5 / 15)


async def test_a_read_sees_observations_made_since_the_last_read(store: StatsStore) -> None:
    await store.observe("a", sample(T0 + 1, ttft_s=0.1))
    assert (await latency(store, T0 + 1.5)).ttft_mean_s == pytest.approx(0.1)
    await store.observe("a", sample(T0 + 2, ttft_s=0.3))
    after = await latency(store, T0 + 2.5)
    assert after.samples == 2
    assert after.ttft_mean_s == pytest.approx(0.2)


async def test_a_late_sample_for_an_earlier_bucket_counts(store: StatsStore) -> None:
    await store.observe("a", sample(T0 + 1, ttft_s=0.1))
    await store.observe("a", sample(T0 + 6, ttft_s=0.1))
    assert (await latency(store, T0 + 7)).samples == 2
    await store.observe("a", sample(T0 + 2, ttft_s=0.1))  # a replica reporting late
    assert (await latency(store, T0 + 7)).samples == 3


async def test_estimates_decay_after_the_window(stores: StoreClients) -> None:
    (store,) = await stores.open(window_s=60, bucket_s=5)
    await store.observe("a", sample(T0 + 1))
    assert (await latency(store, T0 + 2)).samples == 1
    assert (await latency(store, T0 + 59)).samples == 1
    assert (await latency(store, T0 + 60)).samples == 0
    assert await latency(store, T0 + 60) == LatencyEstimate()


async def test_a_degraded_endpoint_shows_within_one_bucket(store: StatsStore) -> None:
    for second in range(60):
        await store.observe("a", sample(T0 + second, ttft_s=0.1))
    before = await latency(store, T0 + 59.9)
    for second in range(5):
        await store.observe("a", sample(T0 + 60 + second, ttft_s=0.3))
    after = await latency(store, T0 + 64.9)
    assert before.ttft_mean_s is not None and after.ttft_mean_s is not None
    assert after.ttft_mean_s > 1.3 * before.ttft_mean_s  # unweighted would be about 1.17x
    assert after.ttft_p95_s is not None and after.ttft_p95_s > 0.25


async def test_estimates_merge_across_clients(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica estimates from its own samples)."""
    clients = await stores.open(4)
    reference = MemoryStatsStore()
    for i in range(40):
        observed = sample(T0 + i * 0.5, prompt_tokens=50 * (i + 1), ttft_s=0.05 + 0.001 * i)
        await clients[i % 4].observe("a", observed)
        await reference.observe("a", observed)
    await landed(*clients)
    merged = await latency(clients[0], T0 + 20)
    expected = await latency(reference, T0 + 20)
    assert merged.samples == expected.samples == 40
    for name in ("ttft_mean_s", "ttft_base_s", "ttft_per_token_s", "ttft_p95_s", "tpot_p50_s"):
        assert getattr(merged, name) == pytest.approx(getattr(expected, name), rel=1e-9), name


async def test_read_of_unknown_endpoints_is_empty(store: StatsStore) -> None:
    stats = await store.read(["x", "y"], now=T0)
    assert stats == {"x": EndpointStats(), "y": EndpointStats()}
