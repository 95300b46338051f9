"""Synthetic workloads and traces: lengths shaped like the public traces, arrivals that follow
the rate shape, and trace files in our own and the public layouts."""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from pathlib import Path

import pytest

from gateway.config.settings import SloClassConfig
from gateway.offline.scenarios import SCENARIOS
from gateway.offline.trace import PlannedRequest, TraceError, read_trace, write_trace
from gateway.offline.workload import LengthSpec, RateShape


def quantile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def test_lengths_follow_the_trace_quantiles() -> None:
    sampler = LengthSpec(profile="conversation", max_tokens=100_000).sampler("prompt")
    rng = random.Random(7)
    draws = [sampler.draw(rng) for _ in range(20_000)]
    # Azure 2023 conversation prompts: p25 396, p50 1020, p90 2734 tokens
    assert quantile(draws, 0.25) == pytest.approx(396, rel=0.05)
    assert quantile(draws, 0.50) == pytest.approx(1020, rel=0.05)
    assert quantile(draws, 0.90) == pytest.approx(2734, rel=0.05)


def test_lengths_are_scaled_then_clipped() -> None:
    sampler = LengthSpec(profile="code", scale=0.5, min_tokens=10, max_tokens=500).sampler("prompt")
    rng = random.Random(3)
    draws = [sampler.draw(rng) for _ in range(5_000)]
    assert min(draws) == 10 and max(draws) == 500
    assert quantile(draws, 0.25) == pytest.approx(578 * 0.5, rel=0.1)  # below the clip


def test_arrivals_integrate_the_rate_shape() -> None:
    shape = RateShape.spike(base=2.0, peak=20.0, at_s=10.0, length_s=5.0, end_s=30.0)
    rng = random.Random(11)
    runs = [list(shape.arrivals(rng)) for _ in range(40)]
    in_spike = statistics.mean(sum(10.0 <= t < 15.0 for t in run) for run in runs)
    total = statistics.mean(len(run) for run in runs)
    assert shape.expected() == pytest.approx(2.0 * 25 + 20.0 * 5)
    assert in_spike == pytest.approx(100, rel=0.1)
    assert total == pytest.approx(150, rel=0.1)
    assert all(0 <= t < 30 for run in runs for t in run)


def test_ramp_arrivals_grow_with_the_rate() -> None:
    shape = RateShape.ramp(0.0, 10.0, 0.0, 20.0)
    arrivals = list(shape.arrivals(random.Random(5)))
    first_half = sum(t < 10 for t in arrivals)
    assert len(arrivals) == pytest.approx(100, rel=0.25)
    assert first_half < len(arrivals) / 2  # a quarter of the area lies in the first half


def test_bursty_arrivals_keep_the_rate_and_the_variation() -> None:
    shape = RateShape.constant(5.0, 0.0, 2_000.0)
    arrivals = list(shape.arrivals(random.Random(2), cv=3.0))
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert len(arrivals) == pytest.approx(10_000, rel=0.1)
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(3.0, rel=0.2)


def test_the_same_seed_plans_the_same_requests() -> None:
    scenario = SCENARIOS["multi_tenant"]()
    assert scenario.plan() == scenario.plan()
    assert scenario.plan(seed=2) != scenario.plan()
    plan = scenario.plan()
    assert [r.arrival_s for r in plan] == sorted(r.arrival_s for r in plan)
    assert {r.tenant for r in plan} == set(scenario.tenants)


# overload measures goodput per 10 s before, during and after 30 s at twice the knee
LONGER_S = {"fleet20": 1000, "overload": 90}


def test_every_catalogue_scenario_is_bounded_and_consistent() -> None:
    for name, make in SCENARIOS.items():
        scenario = make()
        assert scenario.name == name
        assert scenario.duration_s <= LONGER_S.get(name, 30)
        assert all(isinstance(c, SloClassConfig) for c in scenario.classes.values())
        assert scenario.description


def test_reads_the_azure_trace_layout(tmp_path: Path) -> None:
    path = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:15:45.1805900,879,0\n"
    )
    requests = read_trace(path, default_tenant="azure", default_class="interactive")
    assert [r.arrival_s for r in requests] == pytest.approx([0.0, 1.5, 5.814579])
    assert [(r.prompt_tokens, r.output_tokens) for r in requests] == [
        (879, 1),
        (374, 44),
        (396, 109),
    ]
    assert {(r.tenant, r.slo_class) for r in requests} == {("azure", "interactive")}


def test_reads_the_mooncake_layout_in_milliseconds(tmp_path: Path) -> None:
    path = tmp_path / "conversation_trace.jsonl"
    rows = [
        {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [1, 2]},
        {"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [1]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    requests = read_trace(path)
    assert [r.arrival_s for r in requests] == pytest.approx([0.0, 3.053])
    assert requests[0].prompt_tokens == 6955


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_our_trace_format_round_trips(tmp_path: Path, suffix: str) -> None:
    requests = [
        PlannedRequest(0.0, 100, 20, "gold", "interactive"),
        PlannedRequest(1.25, 3000, 200, "jobs", "batch"),
    ]
    path = tmp_path / f"trace{suffix}"
    write_trace(path, requests)
    assert read_trace(path) == requests


def test_a_row_without_token_counts_is_an_error_naming_the_row(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("arrival_s,prompt_tokens\n0,10\n")
    with pytest.raises(TraceError, match=r"bad.csv, line 2: output_tokens: missing column"):
        read_trace(path)


def test_an_empty_trace_plans_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    assert read_trace(path) == []
    assert math.isfinite(RateShape.constant(1.0, 0.0, 1.0).expected())
