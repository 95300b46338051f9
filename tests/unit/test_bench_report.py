"""Summaries, the SLO verdict and the files of a sweep, from hand-made level runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gateway.bench.sweep import Level, LevelRun, SweepSample
from gateway.bench.sweep_client import Measurement
from gateway.bench.sweep_report import (
    REQUEST_FIELDS,
    Slo,
    highest_passing,
    percentile,
    render_errors,
    render_notes,
    render_table,
    summarize_level,
    write_csv,
    write_json,
)


def _ok(ttft_s: float, tpot_s: float, tokens: int = 11, counted: bool = False) -> Measurement:
    e2e_s = ttft_s + tpot_s * (tokens - 1)
    itl = (tpot_s,) * (tokens - 1)
    return Measurement(None, 200, e2e_s, ttft_s, tpot_s, itl, tokens, counted, 130)


def _failed() -> Measurement:
    return Measurement("HTTP 503: overloaded", 503, 0.01)


def _run(prompt: int, conc: int, ms: list[Measurement], wall_s: float = 2.0) -> LevelRun:
    level = Level(prompt, conc)
    records = tuple(SweepSample(level, i, 0.1 * i, m) for i, m in enumerate(ms))
    return LevelRun(level, wall_s, records)


def test_percentile_interpolates_linearly() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 95) == pytest.approx(95.05)
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


@pytest.mark.parametrize(
    ("text", "slo"),
    [
        ("ttft=500ms,tpot=50ms", Slo(0.5, 0.05)),
        ("TTFT=2s", Slo(ttft_s=2.0)),
        ("tpot=12.5ms", Slo(tpot_s=0.0125)),
    ],
)
def test_slo_parse(text: str, slo: Slo) -> None:
    assert Slo.parse(text) == slo


@pytest.mark.parametrize("text", ["", "ttft=fast", "e2e=1s", "ttft=500"])
def test_slo_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        Slo.parse(text)


def test_summary_percentiles_and_throughput() -> None:
    ms = [_ok(0.1 + 0.01 * i, 0.02) for i in range(20)] + [_failed()]
    s = summarize_level(_run(128, 4, ms, wall_s=2.0))
    assert (s.requests, s.failed) == (21, 1)
    assert s.ttft_s.p50 == pytest.approx(0.195)
    assert s.tpot_s.p95 == pytest.approx(0.02)
    assert s.itl_s.p99 == pytest.approx(0.02)
    assert s.throughput_tokens_per_s == pytest.approx(20 * 11 / 2.0)
    assert s.requests_per_s == pytest.approx(10.0)
    assert s.prompt_tokens_reported_p50 == 130


def test_slo_misses_name_the_metric_and_count_failures() -> None:
    slo = Slo(ttft_s=0.2, tpot_s=0.05)
    fast = summarize_level(_run(128, 1, [_ok(0.1, 0.02)] * 20))
    slow_ttft = summarize_level(_run(128, 4, [_ok(0.3, 0.02)] * 20))
    failing = summarize_level(_run(128, 8, [_ok(0.1, 0.02)] * 18 + [_failed()] * 2))  # 10% failed
    assert fast.slo_misses(slo) == []
    assert slow_ttft.slo_misses(slo) == ["ttft"]
    assert failing.slo_misses(slo) == ["errors"]


def test_highest_passing_stops_at_the_first_miss() -> None:
    slo = Slo(ttft_s=0.2)
    summaries = [
        summarize_level(_run(128, 1, [_ok(0.1, 0.02)] * 5)),
        summarize_level(_run(128, 4, [_ok(0.15, 0.02)] * 5)),
        summarize_level(_run(128, 16, [_ok(0.5, 0.02)] * 5)),
        summarize_level(_run(128, 32, [_ok(0.1, 0.02)] * 5)),  # lucky level above a miss
        summarize_level(_run(2000, 1, [_ok(0.4, 0.02)] * 5)),
    ]
    assert highest_passing(summaries, slo) == {128: 4, 2000: None}


def test_table_marks_misses_and_notes_name_the_best_level() -> None:
    slo = Slo(ttft_s=0.2, tpot_s=0.05)
    summaries = [
        summarize_level(_run(128, 1, [_ok(0.1, 0.02)] * 5)),
        summarize_level(_run(128, 4, [_ok(0.1, 0.08)] * 5)),
    ]
    table = render_table(summaries, slo)
    header, first, second = table.splitlines()
    assert header.split()[:4] == ["prompt", "conc", "ok", "ttft_p50_ms"]
    assert first.split()[-1] == "ok"
    assert second.endswith("MISS tpot")
    notes = render_notes(summaries, slo)
    assert (
        "highest concurrency meeting SLO ttft<=200ms tpot<=50ms at p95: prompt 128: concurrency 1"
        in notes
    )
    assert render_table(summaries, slo, markdown=True).startswith("| prompt | conc |")


def test_notes_say_when_tokens_were_counted() -> None:
    summaries = [summarize_level(_run(128, 1, [_ok(0.1, 0.02, counted=True)]))]
    assert any("sent no usage" in note for note in render_notes(summaries))


def test_errors_are_grouped_by_message() -> None:
    records = _run(128, 1, [_failed(), _failed(), _ok(0.1, 0.02)]).records
    assert render_errors(records) == ["error x2: HTTP 503: overloaded"]


def test_csv_and_json_hold_every_request(tmp_path: Path) -> None:
    runs = [_run(128, 1, [_ok(0.1, 0.02, tokens=3), _failed()]), _run(2000, 4, [_ok(0.3, 0.03)])]
    write_csv([r for run in runs for r in run.records], tmp_path / "requests.csv")
    write_json(runs, Slo(ttft_s=0.2), {"model": "m"}, tmp_path / "results.json")
    with (tmp_path / "requests.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == REQUEST_FIELDS and len(rows) == 3
    assert rows[0]["ttft_ms"] == "100.0" and rows[0]["itl_ms"] == "20.0;20.0"
    assert rows[1]["ok"] == "False" and rows[1]["error"] == "HTTP 503: overloaded"
    doc = json.loads((tmp_path / "results.json").read_text())
    assert len(doc["requests"]) == 3 and len(doc["levels"]) == 2
    assert doc["highest_passing_concurrency"] == {"128": None, "2000": None}
    assert doc["levels"][0]["ttft_s"]["p50"] == pytest.approx(0.1)
