"""Outcomes against their predictions (window.py, calibration): ratio histograms that merge
across replicas exactly, on every store."""

from __future__ import annotations

import random

import pytest

from gateway.state.memory_store import MemoryStatsStore
from gateway.state.store import LatencySample, StatsStore
from policies.base import LatencyEstimate
from tests.contract.conftest import StoreClients, landed

T0 = 1_000_000.0


def outcome(at_s: float, predicted_s: float, ratio: float) -> LatencySample:
    return LatencySample(
        at_s, True, 200, 400, 30, predicted_s * ratio, 0.02 * ratio, 1.0,
        ttft_predicted_s=predicted_s, tpot_predicted_s=0.02,
    )  # fmt: skip


async def latency(store: StatsStore, now: float) -> LatencyEstimate:
    await landed(store)
    return (await store.read(["a"], now=now))["a"].latency


async def test_ratio_quantiles_merge_across_replicas(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica learns from its own outcomes)."""
    clients = await stores.open(3)
    reference = MemoryStatsStore()
    rng = random.Random(3)
    for i in range(90):
        observed = outcome(T0 + i * 0.2, rng.uniform(0.1, 1.0), rng.lognormvariate(0.0, 0.3))
        await clients[i % 3].observe("a", observed)
        await reference.observe("a", observed)
    await landed(*clients)
    merged, expected = await latency(clients[0], T0 + 19), await latency(reference, T0 + 19)
    assert merged.ttft_ratio_n == merged.tpot_ratio_n == expected.ttft_ratio_n == 90
    for name in ("ttft_ratio_p95", "tpot_ratio_p95"):
        assert getattr(merged, name) == pytest.approx(getattr(expected, name), rel=1e-9), name
    assert merged.ttft_ratio_p95 is not None and 1.4 < merged.ttft_ratio_p95 < 2.0  # e^(1.645·0.3)


async def test_ratios_leave_with_the_window(stores: StoreClients) -> None:
    (store,) = await stores.open(window_s=60, bucket_s=5)
    await store.observe("a", outcome(T0 + 1, 0.5, 1.5))
    assert (await latency(store, T0 + 2)).ttft_ratio_n == 1
    gone = await latency(store, T0 + 61)
    assert gone.ttft_ratio_n == 0 and gone.ttft_ratio_p95 is None
