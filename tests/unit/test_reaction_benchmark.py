"""benchmarks/reaction.py's measure: the slowed engine's last request, with and without the
policy's exploration probes."""

from __future__ import annotations

from benchmarks.reaction import measure_reaction, scenario_module
from gateway.offline.records import LoadRecord

MODULE = scenario_module()


def sent(at_s: float, endpoint: str, decision: str) -> LoadRecord:
    return LoadRecord(
        request_id=f"{at_s}", tenant="app", slo_class="interactive", arrival_s=at_s,
        start_s=at_s, status=200, outcome="ok", endpoint=endpoint, attempts=1,
        prompt_tokens=100, output_tokens=10, ttft_s=0.1, tpot_s=0.02, e2e_s=0.3,
        decision=decision,
    )  # fmt: skip


def test_exploration_probes_count_apart_from_routing() -> None:
    slowed, at = MODULE.SLOWED, MODULE.SLOWDOWN_AT_S
    found = measure_reaction(
        [
            sent(at - 1.0, slowed, "slo_met"),  # before the slowdown: not counted
            sent(at + 0.5, slowed, "slo_met"),
            sent(at + 7.0, slowed, "explore"),
            sent(at + 8.0, "vllm-b", "slo_met"),
        ],
        MODULE,
    )
    assert (found["last_to_slowed_s"], found["sent_after"]) == (7.0, 2.0)
    assert (found["last_routed_s"], found["explored"]) == (0.5, 1.0)
