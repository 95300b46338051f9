"""A stream observed in parts (first token, stretches, rest) and the fast window, on every store."""

from __future__ import annotations

import pytest

from gateway.state.store import LatencySample, SampleKind, StatsStore
from gateway.state.view import SharedView
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


async def _step_after_one_slow_stream(store: StatsStore, streams: int) -> list[float | None]:
    """`streams` streams at 20 ms, then at SLOW one 3x slower: its first token 0.6 s later,
    its first stretch 16 x 60 ms after that. The view's step ratio at each (None: no step)."""
    for i in range(streams):
        await observe_stream(store, T0 + i)
    slow_s = T0 + streams + 5.0  # the fast window holds none of the streams before
    clock = [slow_s]
    view = SharedView(store, ["a"], 0.1, clock=lambda: clock[0])
    seen: list[float | None] = []
    for sample_ in (
        part(slow_s + 0.6, "first_token", ttft_s=0.6),
        part(slow_s + 1.56, "progress", tpot_s=0.06),
    ):
        await store.observe("a", sample_)
        await landed(store)
        clock[0] = sample_.at_s + 0.05
        await view.refresh()
        step = view.steps.get("a")
        seen.append(step.ratio if step is not None and step.since_s - slow_s <= 2.0 else None)
    return seen


async def test_a_cold_endpoints_step_shows_within_2_s_of_its_first_slow_token(
    store: StatsStore,
) -> None:
    """Six samples: its window is mostly prior, and one stream yields a stretch a second."""
    at_first_token, at_first_stretch = await _step_after_one_slow_stream(store, streams=6)
    assert at_first_token is not None and at_first_token >= 2.0
    assert at_first_stretch is not None and at_first_stretch >= 2.0


async def test_a_warm_endpoint_needs_more_than_one_slow_stream(store: StatsStore) -> None:
    assert await _step_after_one_slow_stream(store, streams=12) == [None, None]


def test_a_whole_sample_is_unchanged() -> None:
    assert sample(T0).kind == "whole"
