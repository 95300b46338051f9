"""`slo-gateway bench` against the simulated vLLM engine on loopback.

The engine is configured so its latencies are simple to predict: a step costs `step_base_s`
plus `prefill_per_token_s` per prompt token it prefills (no batch, KV or quadratic terms). So an
unloaded request's TTFT is one prefill step and its TPOT is one decode step:

    ttft = step_base_s + prefill_per_token_s * prompt_tokens      tpot = step_base_s
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gateway.bench.api_events import Api, api_headers
from gateway.bench.bench_command import register
from gateway.bench.sweep import SweepPlan, run_sweep
from gateway.bench.sweep_client import (
    Target,
    endpoint_url,
    make_client,
    make_prompt,
    measure_request,
)
from gateway.bench.sweep_report import LevelSummary, summarize_level
from gateway.sim.engine import EngineServerParams, create_engine_app
from gateway.sim.faults import Faults
from tests.fixtures.servers import UvicornThread, serve_app

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PARAMS = EngineServerParams(
    model=MODEL,
    step_base_s=0.02,
    per_seq_s=0.0,
    per_kv_token_s=0.0,
    prefill_per_token_s=0.0002,
    prefill_quadratic_s=0.0,
    max_num_batched_tokens=2048,
    seed=1,
)


def expected_ttft_s(prompt_tokens: float) -> float:
    return PARAMS.step_base_s + PARAMS.prefill_per_token_s * prompt_tokens


@pytest.fixture(scope="module")
def sweep() -> dict[tuple[int, int], LevelSummary]:
    """One small sweep shared by the assertions below (about 5 s on a quiet machine)."""
    plan = SweepPlan(
        prompt_tokens=(128, 1000), concurrency=(1, 4), requests_per_level=6, output_tokens=6
    )

    async def run() -> list[LevelSummary]:
        client = make_client(timeout_s=30, max_connections=4)
        async with serve_app(create_engine_app(PARAMS)) as base_url, client:
            target = Target(endpoint_url(base_url, "chat"), MODEL)
            return [summarize_level(r) for r in await run_sweep(client, target, plan)]

    return {(s.prompt_tokens, s.concurrency): s for s in asyncio.run(run())}


def test_every_request_succeeds_with_usage_tokens(
    sweep: dict[tuple[int, int], LevelSummary],
) -> None:
    for s in sweep.values():
        assert (s.failed, s.requests) == (0, 6)
        assert not s.tokens_counted


@pytest.mark.parametrize("prompt", [128, 1000])
def test_recovers_configured_ttft_unloaded(
    sweep: dict[tuple[int, int], LevelSummary], prompt: int
) -> None:
    s = sweep[(prompt, 1)]
    assert s.prompt_tokens_reported_p50 is not None
    expected = expected_ttft_s(s.prompt_tokens_reported_p50)
    assert s.ttft_s.p50 is not None
    # the step is one sleep of the expected length; HTTP and a step in progress add a little
    assert 0.9 * expected <= s.ttft_s.p50 <= 1.3 * expected + 0.03


@pytest.mark.parametrize("prompt", [128, 1000])
def test_recovers_configured_tpot_unloaded(
    sweep: dict[tuple[int, int], LevelSummary], prompt: int
) -> None:
    tpot = sweep[(prompt, 1)].tpot_s.p50
    assert tpot is not None
    assert 0.9 * PARAMS.step_base_s <= tpot <= 1.3 * PARAMS.step_base_s + 0.005


def test_ttft_rises_with_prompt_length(sweep: dict[tuple[int, int], LevelSummary]) -> None:
    short, long = sweep[(128, 1)].ttft_s.p50, sweep[(1000, 1)].ttft_s.p50
    assert short is not None and long is not None
    assert long > 2.5 * short  # 221 ms vs 46 ms predicted


def test_ttft_rises_with_concurrency(sweep: dict[tuple[int, int], LevelSummary]) -> None:
    for prompt in (128, 1000):
        alone, shared = sweep[(prompt, 1)].ttft_s, sweep[(prompt, 4)].ttft_s
        assert alone.p95 is not None and shared.p95 is not None
        # four prompts that arrive together share one 2048-token prefill budget
        assert shared.p95 > 1.5 * alone.p95


def test_throughput_rises_with_concurrency(sweep: dict[tuple[int, int], LevelSummary]) -> None:
    assert sweep[(128, 4)].throughput_tokens_per_s > 1.5 * sweep[(128, 1)].throughput_tokens_per_s


def test_cli_writes_table_files_and_charts(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    args = ["--model", MODEL, "--out", str(tmp_path), "--prompt-tokens", "64,512"]
    args += ["--concurrency", "1,2", "--requests", "3", "--output-tokens", "4"]
    args += ["--slo", "ttft=100ms,tpot=40ms"]
    with UvicornThread(create_engine_app(PARAMS)) as server:
        result = CliRunner().invoke(app, ["bench", "--base-url", server.base_url + "/v1", *args])
    assert result.exit_code == 0, result.output
    assert "ttft_p95_ms" in result.output and "MISS ttft" in result.output  # 512: ~125 ms
    assert "highest concurrency meeting SLO ttft<=100ms tpot<=40ms at p95: prompt 64:" in (
        result.output
    )
    rows = (tmp_path / "requests.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 * 3
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["highest_passing_concurrency"]["512"] is None
    levels = {(lv["prompt_tokens"], lv["concurrency"]) for lv in doc["levels"]}
    assert levels == {(64, 1), (64, 2), (512, 1), (512, 2)}
    for name in ("latency_vs_concurrency.png", "throughput_vs_latency.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG_SIGNATURE


def test_cli_fails_when_every_request_fails(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    with UvicornThread(create_engine_app(PARAMS)) as server:
        args = ["bench", "--base-url", server.base_url, "--model", "no-such-model"]
        args += ["--concurrency", "1", "--prompt-tokens", "16", "--requests", "2"]
        result = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "HTTP 404" in result.output


async def test_stream_cut_mid_response_is_a_recorded_failure() -> None:
    params = PARAMS.model_copy(update={"faults": Faults(drop_mid_stream=1.0)})
    client = make_client(timeout_s=10, max_connections=1)
    async with serve_app(create_engine_app(params)) as base_url, client:
        target = Target(endpoint_url(base_url, "chat"), MODEL)
        m = await measure_request(client, target, make_prompt(32), max_tokens=8)
    assert not m.ok and m.status == 200
    assert m.error is not None and m.error.startswith("stream broken: ")


@pytest.mark.parametrize("api", ["responses", "messages"])
async def test_bench_times_responses_and_messages_streams(api: Api) -> None:
    client = make_client(timeout_s=30, max_connections=1)
    async with serve_app(create_engine_app(PARAMS)) as base_url, client:
        target = Target(endpoint_url(base_url, api), MODEL, api, api_headers(api))
        measured = await measure_request(client, target, make_prompt(200), 5)
    assert measured.ok and measured.output_tokens == 5 and not measured.tokens_counted
    assert measured.prompt_tokens_reported is not None and measured.prompt_tokens_reported >= 150
    assert measured.ttft_s is not None and measured.ttft_s >= expected_ttft_s(200) * 0.8
