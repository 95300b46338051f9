"""Engine latency histograms: parsed from real pages, differenced over the scrapes' window."""

from __future__ import annotations

import pytest

from gateway.watch.engine_histograms import EngineHistogram, recent
from gateway.watch.scraper import LatestScrapes, parse_metrics
from tests.unit.test_scraper import page

TTFT = "vllm:time_to_first_token_seconds"


def vllm_page(ttft: list[tuple[str, float]], total_s: float, engines: int = 1) -> str:
    lines = ["vllm:num_requests_running 1", "vllm:num_requests_waiting 0"]
    for engine in range(engines):
        labels = f'engine="{engine}",model_name="m"'
        lines += [f'{TTFT}_bucket{{le="{le}",{labels}}} {count}' for le, count in ttft]
        lines += [f"{TTFT}_sum{{{labels}}} {total_s}", f"{TTFT}_count{{{labels}}} {ttft[-1][1]}"]
    return "\n".join(lines) + "\n"


def test_a_real_vllm_page_gives_its_three_histograms() -> None:
    ttft, itl, queue = parse_metrics(page("vllm-0.32-metrics.txt")).histograms
    assert ttft is not None and itl is not None and queue is not None
    assert ttft.buckets[-1][0] == float("inf")
    assert ttft.observed == ttft.buckets[-1][1]


def test_an_older_vllm_page_gives_what_it_carries() -> None:
    ttft, _, _ = parse_metrics(page("vllm-v0-metrics.txt")).histograms
    assert ttft == EngineHistogram(402.0, 41.7, ((0.001, 0.0), (0.1, 310.0), (float("inf"), 402.0)))


def test_series_of_data_parallel_engines_are_summed() -> None:
    text = vllm_page([("0.1", 4.0), ("+Inf", 5.0)], 0.5, engines=2)
    ttft, _, _ = parse_metrics(text).histograms
    assert ttft == EngineHistogram(10.0, 1.0, ((0.1, 8.0), (float("inf"), 10.0)))


def test_recent_mean_and_p95_come_from_what_was_added() -> None:
    before = EngineHistogram(100.0, 10.0, ((0.1, 90.0), (0.5, 100.0), (float("inf"), 100.0)))
    now = EngineHistogram(
        120.0, 14.0, ((0.1, 90.0), (0.5, 110.0), (1.0, 120.0), (float("inf"), 120.0))
    )
    mean_s, p95_s = recent(now, before)
    assert mean_s == pytest.approx(0.2)
    # 20 added: 10 in (0.1, 0.5], 10 in (0.5, 1.0]; the 19th is 90% through the second bucket
    assert p95_s == pytest.approx(0.5 + 0.5 * 0.9)


def test_no_new_observations_or_a_restart_say_nothing() -> None:
    seen = EngineHistogram(10.0, 1.0, ((float("inf"), 10.0),))
    assert recent(seen, seen) == (None, None)
    assert recent(EngineHistogram(2.0, 0.1, ((float("inf"), 2.0),)), seen) == (None, None)
    assert recent(seen, None) == (None, None)


def test_signals_carry_the_recent_ttft_over_the_rate_window() -> None:
    latest = LatestScrapes(stale_after_s=5.0, rate_window_s=2.0)
    latest.put("e", parse_metrics(vllm_page([("0.1", 10.0), ("+Inf", 10.0)], 0.5)), 100.0)
    latest.put("e", parse_metrics(vllm_page([("0.1", 10.0), ("+Inf", 20.0)], 3.5)), 101.0)
    signals = latest.signals("e", 101.5)
    assert signals is not None
    assert signals.ttft_recent_s == pytest.approx(0.3)  # 10 more, 3 s more
    assert signals.ttft_recent_p95_s == pytest.approx(0.1)  # beyond the last finite bound
    assert signals.age_s == pytest.approx(0.5)
    assert signals.itl_recent_s is None  # the page carries no inter-token histogram
