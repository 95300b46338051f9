"""`slo-gateway loadtest --policy-file`: the live gateway runs the labelled config."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gateway.offline.scenario import Scenario
from gateway.offline.scenarios import chat
from loadtests.live import LiveOptions, run_live

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("locust") is None, reason="needs Locust (the `load` extra)"
    ),
]


def tiny() -> Scenario:
    return chat().model_copy(update={"duration_s": 3.0, "drain_s": 10.0, "checks": []})


@pytest.mark.timeout(60)
def test_a_labelled_config_is_what_the_live_gateway_routes_with(tmp_path: Path) -> None:
    # the label's default would be least_loaded; the section says round_robin
    options = LiveOptions(policy="rotating", config={"name": "round_robin"})
    run = run_live(tiny(), tmp_path, options)
    assert run.summary.policy == "rotating"
    assert len(run.records) == len(tiny().plan()) > 5
    assert {r.decision for r in run.records} == {"rotation"}, {r.decision for r in run.records}
    members = {e.id for e in tiny().engines} | {p.id for p in tiny().providers}
    assert {r.endpoint for r in run.records} == members  # round robin over the whole fleet
