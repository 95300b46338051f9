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

from policies import fast_paths
from policies.admission import AdmissionParams, Saturation, _states, _states_python
from policies.base import EndpointSnapshot, RouteRequest, SloTarget
from policies.estimate import EstimateParams, Estimator
from policies.slo_aware import _tiers, _tiers_python
from tests.unit.test_admission_states import snapshots as admission_snapshots
from tests.unit.test_fast_paths import cases

BUILT = fast_paths.built()
pytestmark = pytest.mark.skipif(
    not all(BUILT.values()) and not os.environ.get("CI"),
    reason=f"compiled loops not built ({BUILT}): pip install -e . with a C compiler",
)


def test_ci_builds_every_compiled_loop() -> None:
    """CI installs with a compiler, so every loop must run compiled there."""
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
def test_compiled_admission_states_equal_the_python(
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


@settings(max_examples=400, deadline=None)
@given(
    cases(),
    st.sampled_from([0.0, 0.2, 0.35]),
    st.sampled_from([None, "", "session-7"]),
    st.floats(0.5, 1.0),
    st.booleans(),
)
def test_compiled_tiers_equal_the_python(
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
    fast_rng, plain_rng = random.Random(3), random.Random(3)
    fast = _tiers(request, candidates, rows, fast_rng, band, home, comfort)
    plain = _tiers_python(request, candidates, rows, plain_rng, band, home, comfort)
    assert same(list(fast), list(plain))
    assert fast_rng.random() == plain_rng.random()  # the same number of ties drawn
