"""Chat sessions live and offline agree: both run a short sessions scenario closed loop per
session (a later turn arrives `think_s` after its previous turn's answer ended:
loadtests/sessions.py, gateway/offline/session_turns.py), about 25 s live.

Agreement tolerances, absolute: chat SLO attainment within 0.1 (or two of the class's requests
when that is more), and the engines' cached-token share (cached over prompt tokens of the served
requests) within 0.15. The live run adds what the simulator leaves out (HTTP, the SSE relay,
Locust, a busy shared CPU), which only slows answers: later turns arrive a little later live,
and slo_aware keeps fewer sessions on the engine holding their prefix (it measures slower
engines live, we suppose; the cause is not confirmed). Measured in three runs on the shared
2-core machine: attainment 0.95-0.99 live, 1.00 offline; cached share 0.68-0.71 live, 0.76
offline (in one run 38 of 64 later turns stayed on their previous turn's engine live, 54
offline). Open loop, the simulator gave 0.95 and 0.61, also within these tolerances: what tells
the closed loop from the open one is the first test.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gateway.offline.prefix_scenarios import PrefixScenario, sessions_slow
from gateway.offline.records import LoadRecord
from gateway.offline.runs import Run, simulate
from gateway.offline.workload import RateShape
from tests.fixtures.live_runs import attainment, live_run, needs_locust

pytestmark = [pytest.mark.integration, needs_locust]

POLICY = "slo_aware"
ATTAINMENT_TOLERANCE = 0.1
CACHED_SHARE_TOLERANCE = 0.15
DURATION_S = 15.0


def short_sessions() -> PrefixScenario:
    """sessions_slow cut to 15 s: 32 sessions of 3 turns (4.5 s think time) starting within
    4 s, batch at 0.5 req/s; closed loop, the last turns arrive at about 21 s."""
    scenario = sessions_slow()
    shorter = {"sessions": 32, "turns": 3, "start_within_s": 4.0}
    sessions = scenario.sessions[0].model_copy(update=shorter)
    batch = scenario.traffic[0].model_copy(update={"shape": RateShape.constant(0.5, 0, DURATION_S)})
    update = {
        "name": "sessions_short",
        "duration_s": DURATION_S,
        "drain_s": 15.0,
        "sessions": [sessions],
        "traffic": [batch],
    }
    return scenario.model_copy(update=update)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run]:
    scenario = short_sessions()
    live, _ = live_run(tmp_path_factory, scenario, POLICY)
    offline, _ = simulate(scenario, scenario.plan(), POLICY)
    return live, offline


def cached_share(records: Sequence[LoadRecord]) -> float:
    served = [r for r in records if r.outcome == "ok"]
    return sum(r.cached_tokens for r in served) / max(1, sum(r.prompt_tokens for r in served))


@pytest.mark.timeout(120)
def test_later_turns_arrive_think_s_after_the_previous_turn_ended(runs: tuple[Run, Run]) -> None:
    """In both drivers, by the records: turn k's arrival is turn k-1's end plus `think_s`."""
    plan = short_sessions().plan()
    turns = {(getattr(r, "session", None), getattr(r, "turn", 0)): i for i, r in enumerate(plan)}
    for run in runs:
        by_id = {int(r.request_id): r for r in run.records}
        later = [(s, t, i) for (s, t), i in turns.items() if s is not None and t > 0]
        assert later and all(by_id[i].reason != "unfinished" for _, _, i in later)  # all sent
        for session, turn, index in later:
            previous = by_id[turns[(session, turn - 1)]]
            ended_s = previous.start_s + (previous.e2e_s or 0.0)
            think_s = getattr(plan[index], "think_s", 0.0)
            assert by_id[index].arrival_s == pytest.approx(ended_s + think_s, abs=0.05)


@pytest.mark.timeout(120)
def test_offline_agrees_with_live_on_chat_attainment(runs: tuple[Run, Run]) -> None:
    live, offline = runs
    chat = live.summary.groups["class:chat"]
    tolerance = max(ATTAINMENT_TOLERANCE, 2 / chat.count)
    live_value, offline_value = (
        attainment(live.summary, "chat"),
        attainment(offline.summary, "chat"),
    )
    assert abs(live_value - offline_value) <= tolerance, (live_value, offline_value)


@pytest.mark.timeout(120)
def test_offline_agrees_with_live_on_the_cached_token_share(runs: tuple[Run, Run]) -> None:
    live, offline = runs
    live_value, offline_value = cached_share(live.records), cached_share(offline.records)
    assert abs(live_value - offline_value) <= CACHED_SHARE_TOLERANCE, (live_value, offline_value)


@pytest.mark.timeout(120)
def test_live_records_carry_the_predicted_p95s_for_the_coverage_table(
    runs: tuple[Run, Run],
) -> None:
    """Live, each served record holds the p95s the gateway predicted (its
    x-slo-gateway-predicted-*-p95-ms headers), so the live report's coverage table is filled as
    the simulator's is."""
    for run in runs:
        served = [r for r in run.records if r.outcome == "ok"]
        assert served
        assert all(r.predicted_ttft_p95_s is not None for r in served)
        assert all(r.predicted_tpot_p95_s is not None for r in served)
        chat = run.summary.coverage["class:chat"]
        assert chat.ttft_n == len([r for r in served if r.slo_class == "chat"])
        assert chat.ttft is not None and chat.ttft > 0.5  # p95s, not means
