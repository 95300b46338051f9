"""A trace's block ids as prefix reuse: the simulated engine finds cached tokens exactly where
the trace reuses blocks, and a replay of the sample live and offline agree.

Agreement tolerances, absolute, as tests/integration/test_loadtest_sessions.py has them: per
class attainment within 0.1 (or two of the class's requests when that is more), and the
cached-token share (cached over prompt tokens of the served requests) within 0.15.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import openai
import pytest

from gateway.offline.prefix_scenarios import sessions_slow
from gateway.offline.records import LoadRecord
from gateway.offline.runs import Run, for_trace, simulate
from gateway.offline.scenario import Scenario, ScenarioTenant
from gateway.offline.trace import PromptedRequest, read_rows
from gateway.offline.trace_replay import TraceSpec
from gateway.sim.engine import EngineServerParams, create_engine_app
from tests.fixtures.live_runs import attainment, live_run, needs_locust
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).parents[2] / "loadtests" / "traces" / "mooncake.jsonl"
POLICY = "slo_aware"
ATTAINMENT_TOLERANCE = 0.1
CACHED_SHARE_TOLERANCE = 0.15


def test_the_engine_hits_exactly_where_the_trace_reuses_blocks() -> None:
    rows = read_rows(SAMPLE)[:30]
    plan = TraceSpec(path=SAMPLE, requests=30).plan("m")
    params = EngineServerParams(
        model="m", enable_prompt_tokens_details=True, prefill_per_token_s=1e-6
    )
    seen: set[tuple[int, ...]] = set()
    with UvicornThread(create_engine_app(params)) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0)
        for row, planned in zip(rows, plan, strict=True):
            assert isinstance(planned, PromptedRequest) and planned.body is not None
            answer = client.chat.completions.create(
                model="m", messages=planned.body["messages"], max_tokens=2
            )
            details = answer.usage.prompt_tokens_details if answer.usage else None
            cached = details.cached_tokens if details else 0
            reused = _seen_run(row.hash_ids, seen)
            # a reused 512-token block is 32 of the engine's 16-token blocks
            assert cached == 512 * reused, (row.hash_ids, cached)
            seen |= {row.hash_ids[:n] for n in range(1, len(row.hash_ids) + 1)}
    assert any(_seen_run(r.hash_ids, set()) == 0 for r in rows)


def _seen_run(ids: tuple[int, ...], seen: set[tuple[int, ...]]) -> int:
    """Leading blocks of `ids` whose whole prefix an earlier request sent."""
    count = 0
    while count < len(ids) and ids[: count + 1] in seen:
        count += 1
    return count


def sample_scenario() -> Scenario:
    """The sample's first 30 s, 1.5x faster (20 s), as chat from tenant `app`, on
    sessions_slow's fleet and classes (4 slow-prefill engines: reuse pays, TTFT 2.5 s)."""
    trace = TraceSpec(
        path=SAMPLE, duration_s=30, speedup=1.5, default_tenant="app", default_class="chat"
    )
    fleet = sessions_slow()
    base = Scenario(
        name="trace_sample",
        description="the sample trace, windowed",
        duration_s=1,
        drain_s=20,
        engines=fleet.engines,
        classes=fleet.classes,
        tenants={"app": ScenarioTenant(allowed_classes=["chat"])},
        trace=trace,
    )
    return for_trace(base, base.plan())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run]:
    scenario = sample_scenario()
    live, _ = live_run(tmp_path_factory, scenario, POLICY)
    offline, _ = simulate(scenario, scenario.plan(), POLICY)
    return live, offline


def cached_share(records: Sequence[LoadRecord]) -> float:
    served = [r for r in records if r.outcome == "ok"]
    return sum(r.cached_tokens for r in served) / max(1, sum(r.prompt_tokens for r in served))


@needs_locust
@pytest.mark.timeout(180)
def test_live_and_offline_replays_of_the_sample_agree(runs: tuple[Run, Run]) -> None:
    live, offline = runs
    assert len(live.records) == len(offline.records)
    count = live.summary.groups["class:chat"].count
    tolerance = max(ATTAINMENT_TOLERANCE, 2 / count)
    live_value = attainment(live.summary, "chat")
    offline_value = attainment(offline.summary, "chat")
    assert abs(live_value - offline_value) <= tolerance, (live_value, offline_value)
    shares = cached_share(live.records), cached_share(offline.records)
    assert shares[1] > 0.2  # the sample's sessions reuse their prefixes
    assert abs(shares[0] - shares[1]) <= CACHED_SHARE_TOLERANCE, shares
