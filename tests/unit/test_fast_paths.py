"""The policies' inlined hot loops equal their plain versions on random snapshots.

`Estimator.predict_rows` inlines the model that `Estimator.predict` writes step by step, and
`slo_aware._tiers` inlines `headroom`, `EndpointSnapshot.cost` and `utilisation`: they are kept
inline because `benchmarks/decision.py` shows they pay (a call per candidate per request), so
these properties are what lets them stay.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config.settings import Price
from gateway.core.prefix_chain import PrefixChain
from gateway.core.prefix_index import PrefixIndex
from gateway.core.usage import _micro_usd, cost_pusd
from policies.base import EndpointSnapshot, EngineSignals, LatencyEstimate, RouteRequest, SloTarget
from policies.estimate import EstimateParams, Estimator, Prediction
from policies.slo_aware import _tiers, binding, headroom, utilisation

seconds = st.floats(min_value=1e-4, max_value=5.0)
maybe_seconds = st.none() | seconds


@st.composite
def latencies(draw: st.DrawFn) -> LatencyEstimate:
    samples = draw(st.integers(0, 40))
    errors = draw(st.integers(0, samples))
    return LatencyEstimate(
        samples=samples,
        errors=errors,
        throttled=draw(st.integers(0, errors)),
        ttft_mean_s=draw(maybe_seconds),
        ttft_base_s=draw(maybe_seconds),
        ttft_per_token_s=draw(st.none() | st.floats(-1e-4, 1e-3)),
        ttft_p95_s=draw(maybe_seconds),
        tpot_mean_s=draw(maybe_seconds),
        tpot_base_s=draw(maybe_seconds),
        tpot_per_in_flight_s=draw(st.none() | st.floats(-1e-3, 1e-3)),
        tpot_p95_s=draw(maybe_seconds),
        prompt_tokens_mean=draw(st.none() | st.floats(1, 8000)),
    )


@st.composite
def engines(draw: st.DrawFn) -> EngineSignals | None:
    if draw(st.booleans()):
        return None
    gauge = st.none() | st.floats(0, 300)
    return EngineSignals(
        waiting=draw(gauge),
        running=draw(gauge),
        waiting_for_capacity=draw(gauge),
        age_s=draw(st.none() | st.floats(0, 30)),
        preemptions_per_s=draw(st.none() | st.floats(0, 5)),
    )


@st.composite
def snapshots(draw: st.DrawFn, endpoint_id: str) -> EndpointSnapshot:
    price = st.floats(0, 20)
    return EndpointSnapshot(
        endpoint_id,
        draw(st.sampled_from(["vllm", "openai"])),
        in_flight=draw(st.integers(0, 300)),
        max_concurrency=draw(st.none() | st.integers(1, 256)),
        input_price_per_1m=draw(price),
        output_price_per_1m=draw(price),
        engine=draw(engines()),
        latency=draw(latencies()),
        cached_input_price_per_1m=draw(price),
        prefill_tokens=draw(st.just(0) | st.integers(1, 40_000)),
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[RouteRequest, list[EndpointSnapshot]]:
    candidates = [draw(snapshots(f"e{i}")) for i in range(draw(st.integers(1, 6)))]
    prompt = draw(st.integers(1, 20_000))
    cached = {s.endpoint_id: draw(st.floats(0, prompt)) for s in candidates if draw(st.booleans())}
    slo = SloTarget(
        "c",
        ttft_s=draw(st.floats(0.05, 5.0)),  # every class here sets a target: see the last test
        tpot_s=draw(st.none() | st.floats(0.005, 0.5)),
        deadline_s=draw(st.none() | st.floats(0.5, 60.0)),
    )
    max_tokens = draw(st.none() | st.integers(1, 4000))
    request = RouteRequest("r", "m", "t", slo, prompt, max_tokens, cached_tokens=cached)
    return request, candidates


def close(fast: float, plain: float) -> bool:
    if math.isinf(plain) or math.isnan(plain):
        return math.isinf(fast) or math.isnan(fast)
    return fast == pytest.approx(plain, rel=1e-9, abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_predict_rows_equals_the_plain_model(
    case: tuple[RouteRequest, list[EndpointSnapshot]],
) -> None:
    request, candidates = case
    estimator = Estimator(EstimateParams())
    for snapshot, row in zip(candidates, estimator.predict_rows(request, candidates), strict=True):
        fast, plain = Prediction._make(row), estimator.predict(request, snapshot)
        assert (fast.output_tokens, fast.cold) == (plain.output_tokens, plain.cold)
        for name in ("ttft_mean_s", "ttft_p95_s", "tpot_mean_s", "tpot_p95_s", "queued"):
            assert close(getattr(fast, name), getattr(plain, name)), name


@settings(max_examples=300, deadline=None)
@given(cases())
def test_slo_aware_tiers_equal_headroom_cost_and_utilisation(
    case: tuple[RouteRequest, list[EndpointSnapshot]],
) -> None:
    request, candidates = case
    estimator = Estimator(EstimateParams())
    rows = estimator.predict_rows(request, candidates)
    meets, unproven, misses = _tiers(request, candidates, rows, random.Random(0), 0.2)
    tier_of: dict[int, tuple[str, tuple[float | int, ...]]] = {}
    tier_of |= {key[-1]: ("meets", key) for key in meets}
    tier_of |= {key[-1]: ("unproven", key) for key in unproven}
    tier_of |= {key[-1]: ("misses", key) for key in misses}
    output_tokens = request.max_tokens or estimator.default_output_tokens
    for index, (snapshot, row) in enumerate(zip(candidates, rows, strict=True)):
        prediction = Prediction._make(row)
        room = headroom(request.slo, prediction)
        cost = 1e6 * snapshot.cost(
            request.prompt_tokens,
            output_tokens,
            request.cached_tokens.get(snapshot.endpoint_id, 0.0),
        )
        tier, key = tier_of[index]
        if room >= 0:
            assert tier == "meets"
            _, key_cost, _, _, _, used, ratio, _, _ = key
            assert close(1 - ratio, room) and close(key_cost, cost)
            assert close(used, utilisation(snapshot))
        elif 1 - room <= prediction.uncertainty**2:
            assert tier == "unproven"
            assert close(key[0], utilisation(snapshot)) and close(key[1], cost)
        else:
            assert tier == "misses"
            assert close(1 - key[0], room)


def test_a_class_without_targets_meets_everywhere_with_equal_headroom() -> None:
    slo = SloTarget("best_effort")
    request = RouteRequest("r", "m", "t", slo, 100)
    candidates = [EndpointSnapshot("a", "vllm"), EndpointSnapshot("b", "openai", in_flight=9)]
    rows = Estimator(EstimateParams()).predict_rows(request, candidates, tpot=False)
    meets, unproven, misses = _tiers(request, candidates, rows, random.Random(0), 0.2)
    assert len(meets) == 2 and not unproven and not misses
    assert all(headroom(slo, Prediction._make(row)) == math.inf for row in rows)
    assert {key[6] for key in meets} == {0.0}  # the inlined ratio: no target binds


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 12), st.integers(0, 3)), max_size=60),
    st.integers(1, 12),
    st.integers(1, 20_000),
)
def test_prefix_lookup_by_kept_slots_equals_the_bit_loop(
    routes: list[tuple[int, int, int]], depth: int, prompt_tokens: int
) -> None:
    """`PrefixIndex.cached` and `match` read each mask's slots from a memo: the same endpoints,
    tokens and order as walking the mask's bits, on a cold memo and a warm one."""
    chains = [PrefixChain(tuple(range(b, b + 12)), tuple(range(100, 1300, 100))) for b in (0, 5)]
    index = PrefixIndex()
    for endpoint, routed_depth, which in routes:
        chain = chains[which % 2]
        index.routed(f"e{endpoint}", chain._replace(hashes=chain.hashes[:routed_depth]), 0, 0.0)
    for holder in index.holders.values():  # precisions other than 1
        index._precision[holder.slot] = holder.slot / 40
    chain = chains[0]._replace(hashes=chains[0].hashes[:depth], ends=chains[0].ends[:depth])
    for _ in range(2):
        cached, depths = index.cached(chain, prompt_tokens), index.match(chain)
        plain_cached, plain_depths = _bit_loop(index, chain, prompt_tokens)
        assert list(cached.items()) == list(plain_cached.items())
        assert list(depths.items()) == list(plain_depths.items())


def _bit_loop(
    index: PrefixIndex, chain: PrefixChain, prompt_tokens: int
) -> tuple[dict[str, float], dict[str, int]]:
    """`PrefixIndex.cached` and `match` as they were: each mask's bits walked lowest first."""
    ids, precision, cached, depths = index._ids, index._precision, {}, {}
    scale = prompt_tokens / chain.ends[-1]
    for bits, depth in index._walk(chain.hashes):
        tokens = chain.ends[depth - 1] * scale
        while bits:
            low = bits & -bits
            slot = low.bit_length() - 1
            cached[ids[slot]] = precision[slot] * tokens
            depths[ids[slot]] = depth
            bits ^= low
    return cached, depths


@settings(max_examples=300, deadline=None)
@given(
    prices=st.tuples(
        *(st.sampled_from([0.0, 0.0, 0.15, 2.5, 15.0]) for _ in range(2)),
        st.sampled_from([None, 0.0, 0.3]),
    ),
    prompt=st.integers(0, 200_000),
    cached=st.integers(0, 200_000),
    completion=st.integers(0, 50_000),
)
def test_cost_of_a_free_endpoint_short_cut_equals_the_formula(
    prices: tuple[float, float, float | None], prompt: int, cached: int, completion: int
) -> None:
    """`cost_pusd` skips the arithmetic at a free price; the formula gives the same there, and
    everywhere else the short cut is not taken."""
    price = Price(input_per_1m=prices[0], output_per_1m=prices[1], cached_input_per_1m=prices[2])
    formula = round(_micro_usd(price, prompt, cached, completion) * 1e6)
    assert cost_pusd(price, prompt, cached, completion) == formula


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
