"""The chart series (pure) and the PNG files drawn from them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gateway.bench.bench_command import publish_sweep
from gateway.bench.sweep import Level, LevelRun, SweepSample
from gateway.bench.sweep_charts import (
    draw_latency_chart,
    draw_throughput_chart,
    latency_series,
    throughput_series,
)
from gateway.bench.sweep_client import Measurement
from gateway.bench.sweep_report import LevelSummary, Slo, summarize_level

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _summary(prompt: int, conc: int, ttft_s: float, tpot_s: float) -> LevelSummary:
    m = Measurement(None, 200, ttft_s + 9 * tpot_s, ttft_s, tpot_s, (tpot_s,) * 9, 10)
    level = Level(prompt, conc)
    records = tuple(SweepSample(level, i, 0.0, m) for i in range(conc))
    return summarize_level(LevelRun(level, 1.0, records))


@pytest.fixture
def summaries() -> list[LevelSummary]:
    return [
        _summary(p, c, ttft_s=0.02 * c * (1 + p / 1000), tpot_s=0.01 + 0.002 * c)
        for p in (128, 2000)
        for c in (1, 4, 16)
    ]


def test_latency_series_per_metric_prompt_and_percentile(summaries: list[LevelSummary]) -> None:
    series = {s.label: s for s in latency_series(summaries)}
    assert set(series) == {
        f"{metric} {q}, prompt {p}"
        for metric in ("TTFT", "TPOT")
        for q in ("p50", "p95")
        for p in (128, 2000)
    }
    ttft = series["TTFT p95, prompt 2000"]
    assert ttft.x == (1, 4, 16) and ttft.dashed
    assert ttft.y_ms == pytest.approx((0.02 * 3 * 1000, 0.08 * 3 * 1000, 0.32 * 3 * 1000))
    assert series["TPOT p50, prompt 128"].y_ms == pytest.approx((12.0, 18.0, 42.0))


def test_throughput_series_puts_aggregate_tokens_per_s_on_x(summaries: list[LevelSummary]) -> None:
    series = {s.label: s for s in throughput_series(summaries)}
    assert set(series) == {f"{m} p95, prompt {p}" for m in ("TTFT", "TPOT") for p in (128, 2000)}
    assert series["TPOT p95, prompt 128"].x == pytest.approx((10.0, 40.0, 160.0))


def test_charts_are_png_files_with_the_expected_lines(
    summaries: list[LevelSummary], tmp_path: Path
) -> None:
    latency_png, throughput_png = tmp_path / "latency.png", tmp_path / "throughput.png"
    slo = Slo(ttft_s=0.5, tpot_s=0.03)
    latency_labels = draw_latency_chart(summaries, latency_png, slo)
    throughput_labels = draw_throughput_chart(summaries, throughput_png, slo)
    for path in (latency_png, throughput_png):
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        assert path.stat().st_size > 10_000
    assert {s.label for s in latency_series(summaries)} <= set(latency_labels)
    assert "TTFT SLO 500 ms" in latency_labels and "TPOT SLO 30 ms" in latency_labels
    # p95 TTFT at c=16 is 361 ms for prompt 128 and 960 ms for 2000; p95 TPOT at c=16 is 42 ms
    over = {label for label in latency_labels if label.startswith("over SLO")}
    assert over == {
        "over SLO: TTFT p95, prompt 2000",
        "over SLO: TPOT p95, prompt 128",
        "over SLO: TPOT p95, prompt 2000",
    }
    assert {s.label for s in throughput_series(summaries)} <= set(throughput_labels)


def test_without_slo_there_are_no_slo_lines(summaries: list[LevelSummary], tmp_path: Path) -> None:
    labels = draw_latency_chart(summaries, tmp_path / "latency.png")
    assert not [label for label in labels if "SLO" in label]


def test_report_without_matplotlib_writes_files_and_skips_charts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import now fails
    m = Measurement(None, 200, 0.2, 0.1, 0.01, (0.01,), 2)
    level = Level(128, 1)
    run = LevelRun(level, 1.0, (SweepSample(level, 0, 0.0, m),))
    publish_sweep([run], None, {"model": "m"}, tmp_path)
    assert "charts skipped (matplotlib.figure missing)" in capsys.readouterr().out
    assert (tmp_path / "requests.csv").exists() and (tmp_path / "results.json").exists()
    assert not list(tmp_path.glob("*.png"))
