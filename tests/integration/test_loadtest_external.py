"""`slo-gateway loadtest --url`: the same replay against a gateway someone else started."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gateway.offline.scenario import FaultEvent, Scenario
from gateway.offline.scenarios import chat
from loadtests.live import LiveOptions, run_live
from loadtests.stack import Stack

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("locust") is None, reason="needs Locust (the `load` extra)"
    ),
]


def tiny() -> Scenario:
    """Three seconds of chat, with a fault that only a run owning the fleet could send."""
    fault = FaultEvent(at_s=1.0, member="vllm-fast", patch={"status_code": 500})
    update = {"duration_s": 3.0, "drain_s": 10.0, "faults": [fault], "checks": []}
    return chat().model_copy(update=update)


@pytest.mark.timeout(60)
def test_replays_against_an_external_gateway_with_the_given_keys(tmp_path: Path) -> None:
    scenario = tiny()
    with Stack(scenario, "round_robin") as gateway:
        options = LiveOptions(url=gateway.url, keys=scenario.tenant_keys())
        run = run_live(scenario, tmp_path, options)
        members = {m.id for m in gateway.fleet.members()}
    planned = scenario.plan()
    assert run.summary.policy == "external" and run.summary.run["preemptions"] is None
    assert len(run.records) == len(planned) > 5
    # no fault was sent: the external gateway's upstreams are not ours to break
    assert all(r.outcome == "ok" for r in run.records), [r.reason for r in run.records]
    assert {r.endpoint for r in run.records} == members  # round robin over the whole fleet


def test_an_external_gateway_needs_a_key_per_tenant(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no API key for tenants \['app'\]"):
        run_live(tiny(), tmp_path, LiveOptions(url="http://127.0.0.1:9", keys={}))
