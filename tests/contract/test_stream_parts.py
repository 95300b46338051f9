"""A stream observed in parts (first token, stretches, rest) and the fast window, on every store."""

from __future__ import annotations

import pytest

from gateway.state.store import LatencySample, SampleKind, StatsStore
from tests.contract.conftest import StoreClients, landed
from tests.contract.test_estimates import T0, latency, sample


def part(
    at_s: float,
    kind: SampleKind,
    *,
    ok: bool = True,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    tokens: int = 16,
    in_flight: int = 4,
) -> LatencySample:
    return LatencySample(
        at_s, ok, 200 if ok else 502, 300, tokens, ttft_s, tpot_s, 2.0, in_flight, kind
    )


async def observe_stream(store: StatsStore, at_s: float, *, slow: float = 1.0) -> None:
    """First token 0.2 s, 48 tokens in three stretches at 20 ms, then the rest (whole TPOT)."""
    await store.observe("a", part(at_s, "first_token", ttft_s=0.2 * slow))
    for i in range(3):
        await store.observe("a", part(at_s + 0.3 * (i + 1), "progress", tpot_s=0.02 * slow))
    await store.observe("a", part(at_s + 1.0, "rest", tpot_s=0.02 * slow, tokens=49))


async def test_a_stream_in_parts_counts_once_like_a_whole_request(store: StatsStore) -> None:
    await observe_stream(store, T0)
    est = await latency(store, T0 + 1.5)
    assert est.samples == 1
    assert est.ttft_mean_s == pytest.approx(0.2)
    assert est.tpot_mean_s == pytest.approx(0.02)
    # the request's whole TPOT, once (within the histogram's 19% buckets)
    assert est.tpot_p95_s == pytest.approx(0.02, rel=0.19)
    assert est.e2e_mean_s == pytest.approx(2.0)


async def test_stretches_weigh_by_their_tokens(store: StatsStore) -> None:
    await store.observe("a", part(T0, "first_token", ttft_s=0.1))
    await store.observe("a", part(T0 + 0.5, "progress", tpot_s=0.01, tokens=48))
    await store.observe("a", part(T0 + 1.0, "progress", tpot_s=0.05, tokens=16))
    est = await latency(store, T0 + 1.5)
    assert est.tpot_mean_s == pytest.approx((48 * 0.01 + 16 * 0.05) / 64)


async def test_a_stream_failing_after_its_first_token_counts_one_error(
    store: StatsStore,
) -> None:
    await store.observe("a", part(T0, "first_token", ttft_s=0.1))
    await store.observe("a", part(T0 + 0.5, "rest", ok=False))
    est = await latency(store, T0 + 1)
    assert (est.samples, est.errors) == (1, 1)


async def test_the_fast_window_holds_the_last_seconds_only(store: StatsStore) -> None:
    await observe_stream(store, T0)
    await observe_stream(store, T0 + 10, slow=3.0)
    est = await latency(store, T0 + 11.5)
    assert est.fast is not None
    assert est.fast.tpot_mean_s == pytest.approx(0.06)  # only the slow stream's stretches
    assert est.fast.ttft_mean_s == pytest.approx(0.6)
    assert est.fast.in_flight_sum / est.fast.tpot_n == pytest.approx(4)
    assert est.tpot_mean_s is not None and est.tpot_mean_s < 0.06  # the window still mixes
    later = await latency(store, T0 + 20)
    assert later.fast is None


async def test_fast_windows_merge_across_clients(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica estimates from its own samples)."""
    first, second = await stores.open(2)
    await observe_stream(first, T0)
    await observe_stream(second, T0, slow=2.0)
    await landed(first, second)
    est = await latency(first, T0 + 1.5)
    assert est.fast is not None
    assert est.fast.ttft_n == 2
    assert est.fast.ttft_mean_s == pytest.approx(0.3)


def test_a_whole_sample_is_unchanged() -> None:
    assert sample(T0).kind == "whole"
