"""A request's cost in micro-USD (gateway/core/accounting.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config.settings import Price
from gateway.core.accounting import _micro_usd, cost_pusd


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
