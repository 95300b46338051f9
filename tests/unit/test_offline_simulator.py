"""The offline simulator drives the real models, policies and admission in virtual time."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from gateway.config.settings import SloClassConfig, TenantLimits
from gateway.offline.records import LoadRecord
from gateway.offline.report import RunFacts, summarize
from gateway.offline.scenario import EngineSpec, ProviderSpec, Scenario, ScenarioTenant, Traffic
from gateway.offline.scenarios import SCENARIOS, fleet20
from gateway.offline.simulator import Simulator
from gateway.offline.trace import PlannedRequest, PromptedRequest
from gateway.offline.workload import LengthSpec, RateShape
from gateway.sim.faults import Faults
from gateway.sim.model import EngineModel, EngineParams
from gateway.sim.provider import ProviderParams
from gateway.state.background import run_to_completion

CLASSES = {
    "interactive": SloClassConfig(ttft_ms=1000, tpot_ms=100, priority=10),
    "batch": SloClassConfig(deadline_ms=60_000, sheddable=True),
}
SHORT = LengthSpec(profile="conversation", scale=0.25, max_tokens=64)
THINK_S = 0.05


def scenario(**changes: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "unit",
        "description": "unit test",
        "duration_s": 20.0,
        "classes": CLASSES,
        "tenants": {"app": ScenarioTenant(allowed_classes=["interactive", "batch"])},
        "traffic": [
            Traffic(
                tenant="app",
                slo_class="interactive",
                shape=RateShape.constant(2.0, 0, 20),
                prompt=SHORT,
                output=SHORT,
            )
        ],
        "engines": [EngineSpec(id="engine")],
    }
    return Scenario(**(base | changes))


def simulate(spec: Scenario, policy: str = "round_robin", plan: Any = None) -> list[LoadRecord]:
    return Simulator(spec, spec.plan() if plan is None else plan, {"name": policy}).run().records


def test_a_lone_request_takes_exactly_what_the_engine_model_says() -> None:
    spec = scenario()
    records = simulate(spec, plan=[PlannedRequest(0.5, 500, 10, "app", "interactive")])
    model = EngineModel(EngineParams())
    model.submit("r", 500, 10)
    clock_s, first_s = 0.0, None
    while model.has_work:
        step = model.step()
        clock_s += step.duration_s
        if first_s is None and step.tokens_emitted:
            first_s = clock_s
    (record,) = records
    assert first_s is not None
    assert record.outcome == "ok" and record.endpoint == "engine" and record.output_tokens == 10
    assert record.ttft_s == pytest.approx(first_s)
    assert record.e2e_s == pytest.approx(clock_s)
    assert record.tpot_s == pytest.approx((clock_s - first_s) / 9)


def test_a_whole_answer_is_recorded_as_its_client_sees_it() -> None:
    spec = scenario()
    planned = PlannedRequest(0.5, 500, 10, "app", "interactive", stream=False)
    (streamed,) = simulate(spec, plan=[PlannedRequest(0.5, 500, 10, "app", "interactive")])
    (whole,) = simulate(spec, plan=[planned])
    assert whole.outcome == "ok" and whole.output_tokens == 10 and not whole.stream
    assert whole.ttft_s is None and whole.tpot_s is None  # no token before the whole answer
    assert whole.e2e_s == pytest.approx(streamed.e2e_s)


def test_whole_answers_teach_the_estimate_the_tpot_that_streams_show() -> None:
    learned = {}
    for stream in (True, False):
        spec = scenario()
        spec = scenario(traffic=[spec.traffic[0].model_copy(update={"stream": stream})])
        simulator = Simulator(spec, spec.plan(), {"name": "slo_aware"})
        simulator.run()
        learned[stream] = simulator.gateway.view.stats("engine").latency
    streamed, whole = learned[True], learned[False]
    assert whole.tpot_ratio_n == streamed.tpot_ratio_n > 0  # each answer measured its deviation
    assert whole.tpot_mean_s is not None and streamed.tpot_mean_s is not None
    assert whole.tpot_mean_s == pytest.approx(streamed.tpot_mean_s, rel=0.1)


def test_failover_hides_a_provider_outage() -> None:
    down = ProviderParams(faults=Faults(status_code=503), max_concurrency=64)
    spec = scenario(providers=[ProviderSpec(id="provider", params=down)])
    records = simulate(spec)
    attempts = Counter(r.attempts for r in records)
    assert {r.outcome for r in records} == {"ok"}
    assert {r.endpoint for r in records} == {"engine"}
    assert attempts[2] >= 5  # failed over from the provider until its breaker opened
    assert attempts[1] > attempts[2]  # then the breaker kept requests away from it


def test_a_429_storm_cools_the_provider_down_without_errors() -> None:
    storm = ProviderParams(faults=Faults(status_code=429), max_concurrency=64)
    spec = scenario(providers=[ProviderSpec(id="provider", params=storm)])
    records = simulate(spec, "least_loaded")
    assert {r.outcome for r in records} == {"ok"}
    assert sum(r.attempts > 1 for r in records) < len(records) / 2


def test_a_tenant_request_limit_is_exact() -> None:
    spec = SCENARIOS["multi_tenant"]()
    records = simulate(spec, "least_loaded")
    greedy = [r for r in records if r.tenant == "greedy"]
    assert len(greedy) > 30
    assert sum(r.outcome != "shed" for r in greedy) == 20  # 20 per minute, a 20 s run
    assert {r.reason for r in greedy if r.outcome == "shed"} == {"tenant_rate_limited"}
    assert all(r.outcome == "ok" for r in records if r.tenant != "greedy")


def test_a_tenant_concurrency_limit_holds_at_every_moment() -> None:
    limited = ScenarioTenant(allowed_classes=["interactive"], limits=TenantLimits(max_concurrent=2))
    long_answers = LengthSpec(profile="conversation", min_tokens=200, max_tokens=300)
    traffic = Traffic(
        tenant="app",
        slo_class="interactive",
        shape=RateShape.constant(3.0, 0, 20),
        prompt=SHORT,
        output=long_answers,
    )
    records = simulate(scenario(tenants={"app": limited}, traffic=[traffic]))
    served = [(r.start_s, r.start_s + (r.e2e_s or 0)) for r in records if r.outcome == "ok"]
    edges = sorted([(s, 1) for s, _ in served] + [(e, -1) for _, e in served])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    assert peak == 2
    assert Counter(r.reason for r in records if r.outcome == "shed") == Counter(
        {"tenant_concurrency_limited": len(records) - len(served)}
    )


def test_admission_sheds_batch_before_the_engines_preempt() -> None:
    spec = SCENARIOS["kv_ramp"]()
    result = Simulator(spec, spec.plan(), {"name": "round_robin"}).run()
    batch = [r for r in result.records if r.slo_class == "batch"]
    interactive = [r for r in result.records if r.slo_class == "interactive"]
    assert result.preemptions == 0
    assert sum(r.outcome == "shed" for r in batch) >= 5
    assert {r.reason for r in batch if r.outcome == "shed"} <= {
        "saturated",
        "reserved_for_higher_priority",
    }
    assert not any(r.reason in ("saturated", "reserved_for_higher_priority") for r in interactive)


def test_the_same_inputs_give_the_same_run() -> None:
    spec = SCENARIOS["outage"]()
    assert simulate(spec, "slo_aware") == simulate(spec, "slo_aware")


def test_requests_still_running_at_the_drain_deadline_are_errors() -> None:
    spec = scenario(drain_s=0.0)
    records = simulate(spec)
    unfinished = [r for r in records if r.reason == "unfinished"]
    assert unfinished and all(r.outcome == "error" for r in unfinished)
    assert max(r.arrival_s for r in unfinished) > 19.0


def turn(
    arrival_s: float, output_tokens: int, session: str | None, number: int, think_s: float = THINK_S
) -> PromptedRequest:
    where = (session, number, think_s)
    return PromptedRequest(arrival_s, 100, output_tokens, "app", "interactive", None, None, *where)


def test_a_later_turn_arrives_think_s_after_the_previous_turn_ended() -> None:
    """Closed loop per session, as live (tests/unit/test_loadtest_sessions.py): turn 1 is
    planned long before turn 0's 50 tokens are out, and waits for them."""
    plan = [turn(0.0, 50, "s", 0), turn(0.01, 5, "s", 1), turn(0.02, 5, None, 0)]
    first, second, lone = simulate(scenario(), plan=plan)
    assert first.outcome == second.outcome == lone.outcome == "ok"
    assert first.arrival_s == 0.0 and lone.arrival_s == 0.02  # as planned
    assert second.arrival_s == pytest.approx(first.e2e_s + THINK_S)  # not 0.01
    assert second.start_s == second.arrival_s and second.e2e_s is not None
    assert second.e2e_s < first.e2e_s  # measured from its own arrival


def test_a_turn_follows_a_refused_turn_think_s_after_the_refusal() -> None:
    one_at_a_time = ScenarioTenant(
        allowed_classes=["interactive"], limits=TenantLimits(max_concurrent=1)
    )
    plan = [turn(0.0, 50, None, 0), turn(0.01, 5, "s", 0), turn(0.02, 5, "s", 1)]
    lone, first, second = simulate(scenario(tenants={"app": one_at_a_time}), plan=plan)
    assert lone.outcome == "ok" and first.outcome == "shed"  # at once, at 0.01
    assert second.arrival_s == pytest.approx(0.01 + THINK_S)


def test_a_turn_whose_previous_turn_never_ends_is_never_sent() -> None:
    """As live: the next turn waits for an end that does not come within the run, and is
    recorded unfinished at its planned arrival (loadtests/live.py does the same)."""
    plan = [turn(0.0, 2000, "s", 0), turn(0.5, 5, "s", 1), turn(0.6, 1, "t", 0)]
    plan.append(turn(0.7, 5, "t", 1, think_s=5.0))  # its previous turn ends, too late for it
    spec = scenario(duration_s=1.0, drain_s=0.0)
    running, waiting, ends, too_late = simulate(spec, plan=plan)
    assert ends.outcome == "ok"
    assert all(r.reason == "unfinished" for r in (running, waiting, too_late))
    assert (waiting.arrival_s, too_late.arrival_s) == (0.5, 0.7)
    assert waiting.attempts == too_late.attempts == 0


def test_thousands_of_requests_on_twenty_endpoints() -> None:
    spec = fleet20().model_copy(update={"duration_s": 30.0})
    plan = spec.plan()
    result = Simulator(spec, plan, {"name": "least_loaded"}).run()
    summary = summarize(spec, result.records, RunFacts("least_loaded", "offline"))
    assert len(plan) > 2_500
    assert len(result.records) == len(plan)
    assert len({r.endpoint for r in result.records}) == 20
    assert summary.groups["all"].success_rate > 0.99
    assert result.requests_per_s > 0


def test_the_store_driver_refuses_a_coroutine_that_suspends() -> None:
    async def suspends() -> int:
        await asyncio.sleep(0)
        return 1

    with pytest.raises(RuntimeError, match="suspended"):
        run_to_completion(suspends())
