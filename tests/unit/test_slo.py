"""The one SLO judgement (gateway/core/slo.py), used live and offline."""

from __future__ import annotations

from functools import partial

from gateway.config.settings import SloClassConfig
from gateway.core.slo import meets_slo
from gateway.offline.records import LoadRecord, Outcome
from gateway.offline.report import record_meets_slo
from policies.base import SloTarget

INTERACTIVE = SloTarget("interactive", ttft_s=0.5, tpot_s=0.05)
BATCH = SloTarget("batch", deadline_s=60.0)
TTFT_ONLY = SloTarget("short", ttft_s=0.5)
BOUNDED = SloTarget("bounded", ttft_s=0.5, tpot_s=0.05, deadline_s=2.0)
streamed = partial(meets_slo, stream=True, output_tokens=20)
whole = partial(meets_slo, stream=False, ttft_s=None, tpot_s=None)


def test_a_failed_request_misses_whatever_its_times() -> None:
    assert not streamed(INTERACTIVE, ok=False, ttft_s=0.1, tpot_s=0.01, e2e_s=0.5)
    assert not whole(INTERACTIVE, ok=False, e2e_s=0.1, output_tokens=1)


def test_each_streamed_target_binds() -> None:
    assert streamed(INTERACTIVE, ok=True, ttft_s=0.4, tpot_s=0.04, e2e_s=3.0)
    assert not streamed(INTERACTIVE, ok=True, ttft_s=0.6, tpot_s=0.04, e2e_s=3.0)
    assert not streamed(INTERACTIVE, ok=True, ttft_s=0.4, tpot_s=0.06, e2e_s=3.0)
    assert not streamed(BATCH, ok=True, ttft_s=None, tpot_s=None, e2e_s=61.0)


def test_a_stream_without_a_first_token_is_judged_by_its_whole_time() -> None:
    assert streamed(INTERACTIVE, ok=True, ttft_s=None, tpot_s=None, e2e_s=0.45)
    assert not streamed(INTERACTIVE, ok=True, ttft_s=None, tpot_s=None, e2e_s=0.55)


def test_a_missing_tpot_is_not_held_against_the_request() -> None:
    assert streamed(INTERACTIVE, ok=True, ttft_s=0.2, tpot_s=None, e2e_s=0.2)


def test_a_whole_answer_has_the_ttft_target_plus_the_tpot_target_per_later_token() -> None:
    # 21 tokens: 0.5 + 0.05 x 20 = 1.5 s, where the TTFT target alone missed every one
    assert whole(INTERACTIVE, ok=True, e2e_s=1.49, output_tokens=21)
    assert not whole(INTERACTIVE, ok=True, e2e_s=1.51, output_tokens=21)
    assert whole(TTFT_ONLY, ok=True, e2e_s=0.49, output_tokens=21)
    assert not whole(TTFT_ONLY, ok=True, e2e_s=0.51, output_tokens=21)


def test_an_embedding_has_the_ttft_target() -> None:
    assert whole(INTERACTIVE, ok=True, e2e_s=0.49, output_tokens=0)
    assert not whole(INTERACTIVE, ok=True, e2e_s=0.51, output_tokens=0)


def test_a_deadline_bounds_a_whole_answer() -> None:
    assert whole(BATCH, ok=True, e2e_s=59.0, output_tokens=5000)
    assert not whole(BATCH, ok=True, e2e_s=61.0, output_tokens=1)
    assert whole(BOUNDED, ok=True, e2e_s=1.9, output_tokens=100)
    assert not whole(BOUNDED, ok=True, e2e_s=2.1, output_tokens=100)  # budget 5.45 s: capped
    assert whole(SloTarget("none"), ok=True, e2e_s=1e6, output_tokens=1)


def test_the_offline_report_judges_like_the_live_outcome() -> None:
    config = SloClassConfig(ttft_ms=500, tpot_ms=50)
    cases: list[tuple[float | None, float | None, float, Outcome, bool]] = [
        (0.4, 0.04, 3.0, "ok", True),
        (0.6, 0.04, 3.0, "ok", True),
        (None, None, 0.45, "ok", True),
        (None, None, 0.55, "ok", True),
        (0.1, 0.01, 0.2, "error", True),
        (None, None, 0.95, "ok", False),
        (None, None, 1.05, "ok", False),
    ]
    for ttft_s, tpot_s, e2e_s, outcome, stream in cases:
        record = LoadRecord(
            request_id="r",
            tenant="t",
            slo_class="interactive",
            arrival_s=0.0,
            start_s=0.0,
            status=200 if outcome == "ok" else 502,
            outcome=outcome,
            output_tokens=10,
            ttft_s=ttft_s,
            tpot_s=tpot_s,
            e2e_s=e2e_s,
            stream=stream,
        )
        live = meets_slo(
            config.target("interactive"),
            ok=outcome == "ok",
            ttft_s=ttft_s,
            tpot_s=tpot_s,
            e2e_s=e2e_s,
            stream=stream,
            output_tokens=10,
        )
        assert record_meets_slo(record, config) is live
