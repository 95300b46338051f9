"""`only_candidates`: what the router keeps of a policy's ranking."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.candidates import only_candidates
from policies.base import EndpointSnapshot, Ranking

IDS = ("a", "b", "c", "d")


def _plain(ranking: Ranking, allowed: set[str]) -> Ranking:
    """The rule spelled out: allowed endpoints, first occurrence each, in the policy's order."""
    kept = [
        s
        for i, s in enumerate(ranking.endpoints)
        if s.endpoint_id in allowed
        and s.endpoint_id not in {e.endpoint_id for e in ranking.endpoints[:i]}
    ]
    return ranking._replace(endpoints=tuple(kept))


@given(st.lists(st.sampled_from(IDS), max_size=6), st.sets(st.sampled_from(IDS)))
def test_the_kept_ranking_is_the_plain_rules(order: list[str], allowed: set[str]) -> None:
    ranking = Ranking(
        tuple(EndpointSnapshot(i, "vllm") for i in order), predicted_ttft_s=0.2, reason="r"
    )
    assert only_candidates(ranking, allowed) == _plain(ranking, allowed)


def test_a_ranking_with_nothing_to_remove_is_returned_as_it_is() -> None:
    ranking = Ranking((EndpointSnapshot("a", "vllm"), EndpointSnapshot("b", "vllm")))
    assert only_candidates(ranking, {"a", "b", "c"}) is ranking
