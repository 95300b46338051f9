"""Traces as the drivers replay them: the sample in each format, windows, scaling, classes,
block ids as shared text, and bad input named by file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gateway.offline.runs import for_trace, simulate
from gateway.offline.scenarios import SCENARIOS
from gateway.offline.simulate_command import register
from gateway.offline.trace import Columns, PromptedRequest, TraceError, TraceRow, read_rows
from gateway.offline.trace_replay import PromptBand, TraceSpec, block_text
from gateway.sim.prompt_blocks import block_hashes
from loadtests import command as live

SAMPLES = Path(__file__).parents[2] / "loadtests" / "traces"
FORMATS = ["mooncake.jsonl", "ours.jsonl", "azure.csv", "burstgpt.csv"]


@pytest.mark.parametrize("name", FORMATS)
def test_each_sample_format_reads_as_the_same_workload(name: str) -> None:
    reference = read_rows(SAMPLES / "ours.jsonl")
    rows = read_rows(SAMPLES / name)
    assert len(rows) == len(reference) == 72
    assert [r.prompt_tokens for r in rows] == [r.prompt_tokens for r in reference]
    assert [r.output_tokens for r in rows] == [r.output_tokens for r in reference]
    second = 1.0 if name == "burstgpt.csv" else 0.002  # BurstGPT stamps whole seconds
    assert [r.arrival_s for r in rows] == pytest.approx(
        [r.arrival_s for r in reference], abs=second
    )
    with_ids = name.endswith(".jsonl")
    assert all(bool(r.hash_ids) == with_ids for r in rows)


def test_burstgpt_columns_give_tenant_and_class() -> None:
    columns = Columns(tenant_column="Model", class_column="Log Type")
    rows = read_rows(SAMPLES / "burstgpt.csv", columns)
    assert {(r.tenant, r.slo_class) for r in rows} == {
        ("ChatGPT", "Conversation log"),
        ("GPT-4", "API log"),
    }


def test_a_window_is_cut_shifted_and_sped_up() -> None:
    rows = read_rows(SAMPLES / "ours.jsonl")
    inside = [r for r in rows if 10 <= r.arrival_s < 30]
    spec = TraceSpec(path=SAMPLES / "ours.jsonl", start_s=10, duration_s=20, speedup=2)
    plan = spec.plan("m")
    assert [p.arrival_s for p in plan] == pytest.approx([(r.arrival_s - 10) / 2 for r in inside])


def test_token_scale_and_the_prompt_cap_fit_a_smaller_fleet() -> None:
    rows = read_rows(SAMPLES / "mooncake.jsonl")
    spec = TraceSpec(path=SAMPLES / "mooncake.jsonl", token_scale=0.25, max_prompt_tokens=600)
    plan = spec.plan("m")
    template = 4  # the simulated servers count 4 tokens per chat message
    for row, planned in zip(rows, plan, strict=True):
        assert planned.prompt_tokens == min(round(row.prompt_tokens * 0.25), 600) + template
        assert planned.output_tokens == max(1, round(row.output_tokens * 0.25))


def test_class_by_prompt_length_and_by_tenant() -> None:
    bands = [PromptBand(up_to_tokens=1500, slo_class="short")]
    spec = TraceSpec(
        path=SAMPLES / "ours.jsonl",
        class_by_prompt=bands,
        class_of_tenant={"jobs": "batch", "app": "long"},
    )
    plan = spec.plan("m")
    for planned in plan:
        expected = "short" if planned.prompt_tokens - 4 <= 1500 else None
        expected = expected or ("batch" if planned.tenant == "jobs" else "long")
        assert planned.slo_class == expected


def test_a_block_id_is_the_same_text_wherever_it_appears() -> None:
    plan = TraceSpec(path=SAMPLES / "mooncake.jsonl").plan("m")
    rows = read_rows(SAMPLES / "mooncake.jsonl")
    first, later = _sharing_pair(rows)
    a, b = plan[first], plan[later]
    assert isinstance(a, PromptedRequest) and isinstance(b, PromptedRequest)
    shared = _common_run(rows[first].hash_ids, rows[later].hash_ids)
    chars = shared * 512 * 4
    assert a.text is not None and b.text is not None
    assert a.text[: 9 + chars] == b.text[: 9 + chars]  # "<|user|>\n" opens both
    assert a.text[9 + chars : 9 + chars + 4] != b.text[9 + chars : 9 + chars + 4]
    # the engine's 16-token blocks over the shared text hash alike
    common = _common_run(block_hashes(a.text, 16), block_hashes(b.text, 16))
    assert common == shared * 32
    assert len(block_text(5, 512)) == 2048 and block_text(5, 512).startswith(block_text(5, 3))


def test_an_empty_window_says_so() -> None:
    spec = TraceSpec(path=SAMPLES / "ours.jsonl", start_s=500, duration_s=60)
    with pytest.raises(TraceError, match=r"window \[500 s, 560 s\) holds no request"):
        spec.plan("m")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "bad.jsonl",
            '{"timestamp": 1, "input_length": 5, "output_length": 2}\n{"time',
            "line 2: not JSON",
        ),
        (
            "bad.jsonl",
            '\n{"timestamp": 1, "input_length": "many", "output_length": 2}\n',
            "line 2: input_length: could not convert",
        ),
        (
            "bad.csv",
            "Timestamp,Request tokens,Response tokens\n1,5,2\n2,5,x\n",
            "line 3: response tokens",
        ),
        (
            "bad.jsonl",
            '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2, "hash_ids": "a"}\n',
            "line 1: hash_ids",
        ),
    ],
)
def test_a_malformed_row_names_file_line_and_field(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError, match=f"{name}, {message}"):
        read_rows(path)


def test_class_by_prompt_length_from_the_command_line(tmp_path: Path) -> None:
    scenario = tmp_path / "bands.yaml"
    scenario.write_text(
        "name: bands\ndescription: two classes by length\nduration_s: 1\n"
        "engines: [{id: e1}, {id: e2}]\n"
        "classes: {short: {ttft_ms: 1000}, long: {ttft_ms: 5000}}\n"
        "tenants: {default: {allowed_classes: [short, long]}}\n"
    )
    trace = ["--trace", str(SAMPLES / "mooncake.jsonl"), "--slo-class", "long"]
    options = ["--class-by-prompt", "2000=short", "--no-chart", "--out", str(tmp_path)]
    result = CliRunner().invoke(_app(), ["simulate", str(scenario), *trace, *options])
    plan = TraceSpec(path=SAMPLES / "mooncake.jsonl").plan("m")
    template = 4  # the simulated servers count 4 tokens per chat message; bands see the trace's
    short = sum(1 for r in plan if r.prompt_tokens - template <= 2000)
    assert 0 < short < len(plan)
    assert f"| class:short | {short} |" in result.output, result.output
    assert f"| class:long | {len(plan) - short} |" in result.output
    for bad in ("2000", "x=short", "2000=long,1500=short"):
        refused = CliRunner().invoke(
            _app(), ["simulate", str(scenario), *trace, "--class-by-prompt", bad]
        )
        assert refused.exit_code == 2 and "--class-by-prompt" in refused.output, refused.output


def test_simulate_reports_prompts_no_endpoint_can_hold(tmp_path: Path) -> None:
    trace = tmp_path / "long.jsonl"
    rows = [
        {"arrival_s": i, "prompt_tokens": 9000 if i < 2 else 100, "output_tokens": 8}
        for i in range(4)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scenario = tmp_path / "engines.yaml"
    scenario.write_text(
        "name: engines\ndescription: one engine\nduration_s: 5\n"
        "engines: [{id: e}]\nclasses: {interactive: {ttft_ms: 1000}}\n"
        "tenants: {default: {allowed_classes: [interactive]}}\n"
    )
    cli = _app()
    result = CliRunner().invoke(
        cli,
        ["simulate", str(scenario), "--trace", str(trace), "--no-chart", "--out", str(tmp_path)],
    )
    assert "2 of 4 trace requests exceed every endpoint's context (8192 tokens" in result.output
    assert "| all | 4 |" in result.output  # replayed, not dropped


def test_a_scenario_file_may_hold_the_trace(tmp_path: Path) -> None:
    scenario = tmp_path / "replay.yaml"
    scenario.write_text(
        "name: replay\ndescription: the sample, windowed\nduration_s: 1\n"
        "engines: [{id: e1}, {id: e2}]\n"
        "classes: {interactive: {ttft_ms: 5000}, batch: {deadline_ms: 60000, sheddable: true}}\n"
        "tenants: {app: {allowed_classes: [interactive]}}\n"
        f"trace: {{path: {SAMPLES / 'ours.jsonl'}, start_s: 0, duration_s: 20}}\n"
    )
    result = CliRunner().invoke(
        _app(), ["simulate", str(scenario), "--no-chart", "--out", str(tmp_path)]
    )
    inside = [r for r in read_rows(SAMPLES / "ours.jsonl") if r.arrival_s < 20]
    assert f"simulated {len(inside)} requests" in result.output, result.output


def test_a_scenario_files_trace_lies_beside_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        _app(), ["simulate", str(SAMPLES / "sample.yaml"), "--no-chart", "--out", str(tmp_path)]
    )
    assert "simulated 66 requests" in result.output, result.output
    assert "# trace_sample: PASS" in result.output


def _app() -> typer.Typer:
    cli = typer.Typer()
    register(cli)
    live.register(cli)  # `loadtest`, as the real command line has it
    return cli


def _sharing_pair(rows: list[TraceRow]) -> tuple[int, int]:
    for later, row in enumerate(rows):
        for first in range(later):
            if _common_run(rows[first].hash_ids, row.hash_ids) >= 2:
                return first, later
    raise AssertionError("the sample shares no prefix")


def _common_run(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


def test_the_cache_bound_counts_blocks_whose_prefix_was_sent_before(tmp_path: Path) -> None:
    trace = tmp_path / "reuse.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1300, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 10, "input_length": 1300, "output_length": 5, "hash_ids": [1, 2, 4]},
        {"timestamp": 20, "input_length": 1300, "output_length": 5, "hash_ids": [9, 2, 3]},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # only the second request's two leading blocks were sent before as a prefix
    assert TraceSpec(path=trace).cache_bound() == pytest.approx(1024 / 3900)
    assert TraceSpec(path=trace, token_scale=0.5).cache_bound() == pytest.approx(512 / 1950)


def test_a_policy_comparison_sets_the_cached_share_against_the_bound(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        _app(),
        [
            "simulate",
            "chat",
            "--trace",
            str(SAMPLES / "mooncake.jsonl"),
            "--policy",
            "least_loaded,prefix_only",
            "--no-chart",
            "--out",
            str(tmp_path),
        ],
    )
    bound = TraceSpec(path=SAMPLES / "mooncake.jsonl").cache_bound()
    assert f"allows a cached share of {bound * 100:.1f}% at most" in result.output
    rows = json.loads((tmp_path / "comparison.json").read_text())
    assert all(0 < row["cached_share"] <= bound for row in rows)


def test_a_long_trace_reports_offered_served_and_cost_per_minute(tmp_path: Path) -> None:
    trace = tmp_path / "long.jsonl"
    rows = [{"arrival_s": 10.0 * i, "prompt_tokens": 200, "output_tokens": 20} for i in range(40)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = SCENARIOS["chat"]().model_copy(update={"trace": TraceSpec(path=trace)})
    scenario = for_trace(base, base.plan())
    run, _ = simulate(scenario, scenario.plan(), "least_loaded")
    timeline = run.summary.timeline
    assert scenario.window_s == 60 and [w.start_s for w in timeline][:3] == [0, 60, 120]
    assert [w.arrivals for w in timeline] == [6, 6, 6, 6, 6, 6, 4]
    assert sum(w.served for w in timeline) == run.summary.groups["all"].ok == 40
    assert sum(w.cost for w in timeline) == pytest.approx(run.summary.groups["all"].cost)
