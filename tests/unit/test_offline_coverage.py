"""The offline report per endpoint: the predicted p95s are honest (of the outcomes routed on a
prediction, 85-99% come within it, in every class with 50 or more) and the split of requests
and spend adds up (gateway/offline/endpoint_split.py)."""

from __future__ import annotations

import pytest

from gateway.offline.runs import simulate
from gateway.offline.scenarios import SCENARIOS


@pytest.mark.parametrize("name", ["chat", "sessions_rag", "sessions_slow"])
def test_the_predicted_ttft_p95_covers_85_to_99_percent(name: str) -> None:
    spec = SCENARIOS[name]()
    run, _ = simulate(spec, spec.plan(), "slo_aware")
    judged = {g: c for g, c in run.summary.coverage.items() if "/" not in g and c.ttft_n >= 50}
    assert judged, "no class with 50 predicted outcomes"
    for group, coverage in judged.items():
        assert coverage.ttft is not None and 0.85 <= coverage.ttft <= 0.99, group


def test_the_per_endpoint_split_adds_up_to_the_runs_requests_and_cost() -> None:
    spec = SCENARIOS["chat"]()
    run, _ = simulate(spec, spec.plan(), "slo_aware")
    split, everyone = run.summary.split, run.summary.groups["all"]
    assert len(split) > 1
    assert sum(share.requests for share in split.values()) == everyone.ok
    assert sum(share.cost for share in split.values()) == pytest.approx(everyone.cost)
