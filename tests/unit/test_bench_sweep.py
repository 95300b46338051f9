"""The sweep plan's level order and the progress lines written while it runs."""

from __future__ import annotations

import io

from gateway.bench.client import Measurement
from gateway.bench.sweep import Level, LevelRun, Progress, SweepPlan, SweepSample


def test_levels_go_through_concurrency_for_each_prompt_length() -> None:
    plan = SweepPlan(prompt_tokens=(128, 2000), concurrency=(1, 4))
    assert plan.levels() == [Level(128, 1), Level(128, 4), Level(2000, 1), Level(2000, 4)]


def _run(failed: int) -> LevelRun:
    ok = Measurement(None, 200, 0.2, 0.1, 0.01, (0.01,), 2)
    bad = Measurement("HTTP 503: busy", 503, 0.01)
    level = Level(128, 4)
    records = [SweepSample(level, i, 0.0, bad if i < failed else ok) for i in range(4)]
    return LevelRun(level, 1.5, tuple(records))


def test_progress_off_a_terminal_writes_one_line_per_level() -> None:
    stream = io.StringIO()
    progress = Progress(
        SweepPlan(prompt_tokens=(128,), concurrency=(4,), requests_per_level=4), stream
    )
    for done in range(1, 5):
        progress.advance(Level(128, 4), done)
    progress.level_finished(_run(failed=1))
    assert stream.getvalue() == (
        "[##############################] 4/4 prompt=   128 c=  4 in 1.5s, 1 failed\n"
    )


def test_progress_in_duration_mode_counts_requests() -> None:
    stream = io.StringIO()
    progress = Progress(SweepPlan(duration_s=5.0), stream)
    progress.level_finished(_run(failed=0))
    line = stream.getvalue()
    assert line.startswith("prompt=   128 c=  4 requests=    4 elapsed=") and "failed" not in line
