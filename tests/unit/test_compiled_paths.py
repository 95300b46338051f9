"""The compiled hot loops (policies/fast_paths.py) equal their Python, bit for bit.

Each compiled loop is compared with the Python function it copies, on random snapshots, rows
and requests: the same values of the same types, in the same order, and the same draws from
the tie-breaking rng. Without the compiled modules these tests skip, saying so, except under
CI, where setup.py must have built them.
"""

from __future__ import annotations

import math
import os
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.prefix_chain import PrefixChain
from gateway.core.prefix_index import PrefixIndex
from policies import fast_paths
from policies.admission import AdmissionParams, Saturation, _states, _states_python
from policies.base import EndpointSnapshot, RouteRequest, SloTarget
from policies.estimate import EstimateParams, Estimator
from policies.slo_aware import _ranked, _tiers, compiled_args
from tests.unit.test_admission_states import snapshots as admission_snapshots
from tests.unit.test_fast_paths import cases

BUILT = fast_paths.built()  # prefix_index.py, imported above, asks for the prefix lookup
OPEN = Saturation.OPEN
pytestmark = pytest.mark.skipif(
    not all(BUILT.values()) and not os.environ.get("CI"),
    reason=f"compiled loops not built ({BUILT}): pip install -e . with a C compiler",
)


def test_ci_builds_every_compiled_loop() -> None:
    """CI installs with a compiler, so every loop must run compiled there."""
    assert set(BUILT) == {
        "policies._fast_admission",
        "policies._fast_estimate",
        "policies._fast_tiers",
        "gateway.core._fast_prefix",
    }
    assert all(BUILT.values()), BUILT


def same(fast: Any, plain: Any) -> bool:
    """Equal values of equal types, NaN equal to NaN, tuples and lists element by element."""
    if isinstance(plain, tuple | list):
        return (
            type(fast) is type(plain)
            and len(fast) == len(plain)
            and all(same(f, p) for f, p in zip(fast, plain, strict=True))
        )
    if isinstance(plain, float) and math.isnan(plain):
        return isinstance(fast, float) and math.isnan(fast)
    return type(fast) is type(plain) and fast == plain


@settings(max_examples=400, deadline=None)
@given(cases(), st.booleans(), st.floats(0.0, 1.0))
def test_compiled_predict_rows_equals_the_python(
    case: tuple[RouteRequest, list[EndpointSnapshot]], tpot: bool, hit_share: float
) -> None:
    request, candidates = case
    estimator = Estimator(EstimateParams(prefix_p95_hit_share=hit_share))
    for cached in (request.cached_tokens, {}):
        asked = request._replace(cached_tokens=cached)
        plain = estimator.predict_rows_python(asked, candidates, tpot)
        assert same(estimator.predict_rows(asked, candidates, tpot), plain)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=0, max_size=8).flatmap(
        lambda ids: st.tuples(*(admission_snapshots(f"e{i}") for i in ids))
    ),
    st.dictionaries(st.sampled_from([f"e{i}" for i in range(6)]), st.sampled_from(Saturation)),
    st.integers(0, 120_000),
    st.booleans(),
)
def test_compiled_admission_states_and_filter_equal_the_python(
    snapshots: tuple[EndpointSnapshot, ...],
    previous: dict[str, Saturation],
    footprint: int,
    with_request: bool,
) -> None:
    limits = AdmissionParams(hysteresis_band=0.15, reserve_fraction=0.2).limits
    fast_request: dict[str, Saturation] | None = {} if with_request else None
    plain_request: dict[str, Saturation] | None = {} if with_request else None
    fast = _states(previous, snapshots, limits, footprint, request=fast_request)
    plain = _states_python(previous, snapshots, limits, footprint, request=plain_request)
    assert list(fast.items()) == list(plain.items())
    assert all(type(state) is Saturation for state in fast.values())
    if fast_request is not None and plain_request is not None:
        assert list(fast_request.items()) == list(plain_request.items())
        assert all(type(state) is Saturation for state in fast_request.values())
    assert fast_paths.ADMISSION is not None
    for highest in Saturation:
        kept = fast_paths.ADMISSION.within(snapshots, previous, highest)
        assert kept == [s for s in snapshots if previous.get(s.endpoint_id, OPEN) <= highest]


@settings(max_examples=400, deadline=None)
@given(
    cases(),
    st.sampled_from([0.0, 0.2, 0.35]),
    st.sampled_from([None, "", "session-7"]),
    st.floats(0.5, 1.0),
    st.booleans(),
)
def test_compiled_tiers_and_ranking_equal_the_python(
    case: tuple[RouteRequest, list[EndpointSnapshot]],
    band: float,
    session: str | None,
    comfort: float,
    targets: bool,
) -> None:
    request, candidates = case
    if not targets:
        request = request._replace(slo=SloTarget("no_targets"))
    request = request._replace(session=session)
    rows = Estimator(EstimateParams()).predict_rows_python(request, candidates)
    home = session is not None and not request.cached_tokens
    rngs = [random.Random(3) for _ in range(4)]
    assert fast_paths.TIERS is not None
    fast = fast_paths.TIERS.tier_keys(
        *compiled_args(request, candidates, rows, rngs[0], band, home, comfort)
    )
    plain = _tiers(request, candidates, rows, rngs[1], band, home, comfort)
    assert same(list(fast), list(plain))
    for keys in plain:
        keys.sort()
    order = [key[-1] for keys in plain for key in keys]
    ranked = _ranked(request, candidates, rows, rngs[2], band, home, comfort)
    assert same(ranked, (order, len(plain[0]), len(plain[1])))
    _tiers(request, candidates, rows, rngs[3], band, home, comfort)
    draws = {rng.random() for rng in rngs}
    assert len(draws) == 1  # the same number of ties drawn by each


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 70), st.integers(1, 12), st.integers(0, 2)), max_size=80),
    st.integers(0, 12),
    st.integers(1, 20_000),
    st.booleans(),
)
def test_compiled_prefix_lookup_equals_the_python(
    routes: list[tuple[int, int, int]], depth: int, prompt_tokens: int, warm: bool
) -> None:
    """Up to 71 endpoints, so holder masks pass 64 bits; chains that diverge, and a memo of
    each mask's slots that is cold or warm."""
    starts = (0, 5, 100)
    chains = [PrefixChain(tuple(range(b, b + 12)), tuple(range(100, 1300, 100))) for b in starts]
    index = PrefixIndex()
    for endpoint, routed_depth, which in routes:
        chain = chains[which]
        index.routed(f"e{endpoint}", chain._replace(hashes=chain.hashes[:routed_depth]), 0, 0.0)
    for holder in index.holders.values():
        index._precision[holder.slot] = (holder.slot % 7) / 7
    chain = chains[0]._replace(hashes=chains[0].hashes[:depth], ends=chains[0].ends[:depth])
    if warm:
        index.cached_python(chain, prompt_tokens)
    fast = index.cached(chain, prompt_tokens)
    plain = index.cached_python(chain, prompt_tokens)
    assert same(list(fast.items()), list(plain.items()))


def test_a_record_too_short_is_refused_not_read_past_its_end() -> None:
    """The C copies read fields by position without bounds checks, so each checks a record's
    size first: a wrong record is a TypeError, never memory outside the tuple."""
    limits = AdmissionParams().limits
    request = RouteRequest("r", "m", "t", SloTarget("c", ttft_s=1.0), 10)
    short = EndpointSnapshot("e", "vllm", engine=(1.0, 2.0))  # type: ignore[arg-type]
    for candidates in ([("e", "vllm")], [short]):
        with pytest.raises(TypeError, match="NamedTuple"):
            _states({}, candidates, limits, 0)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="NamedTuple"):
            Estimator(EstimateParams()).predict_rows(request, candidates)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "slo",
    [
        SloTarget("ttft_0", ttft_s=0.0),
        SloTarget("tpot_0", ttft_s=1.0, tpot_s=0.0),
        SloTarget("deadline_0", ttft_s=1.0, deadline_s=0.0),
    ],
)
def test_compiled_tiers_divide_by_a_zero_target_as_the_python_does(slo: SloTarget) -> None:
    """A target of 0 s raises ZeroDivisionError in both, as a float division by zero does."""
    request = RouteRequest("r", "m", "t", slo, 100)
    candidates = [EndpointSnapshot("a", "vllm")]
    rows = Estimator(EstimateParams()).predict_rows_python(request, candidates)
    assert fast_paths.TIERS is not None
    args = compiled_args(request, candidates, rows, random.Random(1), 0.2, False, 1.0)
    with pytest.raises(ZeroDivisionError):
        _tiers(request, candidates, rows, random.Random(1), 0.2)
    with pytest.raises(ZeroDivisionError):
        fast_paths.TIERS.tier_keys(*args)
