"""The metrics parser against a real vLLM 0.32 capture and hand-made pages of other engines."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gateway.offline.members import scraped_state
from gateway.sim.engine_metrics import EngineMetrics
from gateway.sim.model import EngineSnapshot
from gateway.watch.engine_names import ENGINES
from gateway.watch.scraper import ScrapedState, parse_metrics

DATA = Path(__file__).parent / "data"


def page(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        (
            "vllm-0.32-metrics.txt",
            ScrapedState(
                "vllm",
                0.0,
                0.0,
                0.0,
                0.0,
                131072,
                0.0,
                waiting_deferred=0.0,
                prefix_cache_queries_total=14.0,
                prefix_cache_hits_total=0.0,
                kv_block_size_tokens=128,
                prefix_caching=True,
            ),
        ),
        (
            "vllm-v0-metrics.txt",
            ScrapedState(
                "vllm",
                3.0,
                12.0,
                0.875,
                None,
                16 * 27264,
                7.0,
                kv_block_size_tokens=16,
                prefix_caching=False,
            ),
        ),
        (
            "sglang-metrics.txt",
            ScrapedState("sglang", 5.0, 24.0, 0.62, None, 120000, None, kv_block_size_tokens=1),
        ),
        (
            "trtllm-metrics.txt",
            ScrapedState("trtllm", 2.0, 30.0, 0.45, None, 32 * 8192, None, kv_block_size_tokens=32),
        ),
        (
            "triton-trtllm-metrics.txt",
            ScrapedState(
                "triton-trtllm", 3.0, 9.0, 0.3, None, 64 * 4096, None, kv_block_size_tokens=64
            ),
        ),
        ("tgi-metrics.txt", ScrapedState("tgi", 4.0, 16.0, None, None, None, None)),
    ],
)
def test_parses_each_engines_page(file: str, expected: ScrapedState) -> None:
    assert without_histograms(parse_metrics(page(file))) == expected


def without_histograms(state: ScrapedState) -> ScrapedState:
    """Histograms are tested on their own (tests/unit/test_engine_histograms.py)."""
    return dataclasses.replace(state, histograms=(None, None, None))


def test_an_explicit_engine_reads_only_its_own_names() -> None:
    assert parse_metrics(page("vllm-0.32-metrics.txt"), engine="tgi") == ScrapedState("tgi")
    assert parse_metrics(page("tgi-metrics.txt"), engine="vllm").waiting is None


def test_an_unknown_page_is_all_unknown() -> None:
    assert parse_metrics("process_cpu_seconds_total 11.5\n") == ScrapedState()
    assert parse_metrics("") == ScrapedState()


V1_DATA_PARALLEL = """\
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 5.0
vllm:num_requests_running{engine="0",model_name="m"} 8
vllm:num_requests_running{engine="1",model_name="m"} 7
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 1.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 1.0
vllm:num_requests_waiting_by_reason{engine="1",model_name="m",reason="capacity"} 4.0
vllm:num_requests_waiting_by_reason{engine="1",model_name="m",reason="deferred"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7
vllm:num_preemptions{engine="0",model_name="m"} 3
vllm:num_preemptions{engine="1",model_name="m"} 4 1795977690000
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="1000"} 1.0
"""


def test_data_parallel_series_are_summed_and_kv_usage_averaged() -> None:
    state = parse_metrics(V1_DATA_PARALLEL)
    assert (state.waiting, state.running, state.waiting_for_capacity) == (7.0, 15.0, 5.0)
    assert state.waiting_deferred == 2.0
    assert state.kv_block_size_tokens == 16, "the block size of each rank, not their sum"
    assert state.kv_usage == pytest.approx(0.6)
    assert state.preemptions_total == 7.0, "counter without _total, sample with a timestamp"
    assert state.kv_capacity_tokens == 32000


def test_kv_capacity_falls_back_to_the_size_label_when_blocks_are_unresolved() -> None:
    text = (
        "vllm:num_requests_running 1\n"
        'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="4096",'
        'num_gpu_blocks="None"} 1.0\n'
    )
    assert parse_metrics(text).kv_capacity_tokens == 4096


def test_a_missing_kv_gauge_is_unknown_not_zero() -> None:
    state = parse_metrics("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n")
    assert state.kv_usage is None
    assert state.kv_capacity_tokens is None
    assert state.waiting == 0.0


def test_malformed_and_nan_samples_are_skipped() -> None:
    text = (
        'vllm:num_requests_running{model_name="m"} NaN\n'
        'vllm:num_requests_waiting{model_name="a}b"} 3\n'
        'vllm:num_requests_waiting{model_name="m"} not-a-number\n'
        "vllm:kv_cache_usage_perc\n"
        'vllm:num_requests_waiting_by_reason{reason="capacity"} 2\n'
    )
    state = parse_metrics(text)
    assert state.running is None
    assert state.waiting == 3.0, "a brace inside a label value, and a name prefixing another"
    assert state.kv_usage is None
    assert state.waiting_for_capacity == 2.0


def test_every_engine_row_has_a_load_signal() -> None:
    for row in ENGINES:
        assert row.waiting.sources and row.running.sources, row.engine


def test_prefix_cache_counters_are_read_under_their_old_names_too() -> None:
    text = (
        "vllm:num_requests_running 1\n"
        "vllm:gpu_prefix_cache_queries_total 900\n"
        "vllm:gpu_prefix_cache_hits_total 300\n"
        'vllm:prefix_cache_queries_created{engine="0"} 1.79e+09\n'
    )
    state = parse_metrics(text)
    assert (state.prefix_cache_queries_total, state.prefix_cache_hits_total) == (900.0, 300.0)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ('enable_prefix_caching="True"', True),
        ('enable_prefix_caching="False"', False),
        ('enable_prefix_caching="None"', None),
        ('block_size="16"', None),
    ],
)
def test_prefix_caching_is_a_flag_or_unknown(labels: str, expected: bool | None) -> None:
    text = f"vllm:num_requests_running 1\nvllm:cache_config_info{{{labels}}} 1.0\n"
    assert parse_metrics(text).prefix_caching is expected


def test_the_simulated_engines_page_parses_to_what_the_offline_simulator_assumes() -> None:
    snapshot = EngineSnapshot(
        running=3,
        waiting=5,
        waiting_capacity=4,
        waiting_deferred=1,
        used_blocks=300,
        num_gpu_blocks=1000,
        block_size=16,
        preemptions_total=7,
        prompt_tokens_total=9000,
        generation_tokens_total=800,
        enable_prefix_caching=True,
        prefix_cache_queries_total=9000,
        prefix_cache_hits_total=2048,
    )
    page = EngineMetrics("m", lambda: snapshot).render().decode()
    # the offline simulator's engines publish no latency histograms: routing never reads them
    assert without_histograms(parse_metrics(page)) == scraped_state(snapshot)
