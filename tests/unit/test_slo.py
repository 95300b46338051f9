"""The one SLO judgement (gateway/core/slo.py), used live and offline."""

from __future__ import annotations

from gateway.config.settings import SloClassConfig
from gateway.core.slo import meets_slo
from gateway.offline.records import LoadRecord
from gateway.offline.report import meets_slo as record_meets_slo
from policies.base import SloTarget

INTERACTIVE = SloTarget("interactive", ttft_s=0.5, tpot_s=0.05)
BATCH = SloTarget("batch", deadline_s=60.0)


def test_a_failed_request_misses_whatever_its_times() -> None:
    assert not meets_slo(INTERACTIVE, ok=False, ttft_s=0.1, tpot_s=0.01, e2e_s=0.5)


def test_each_target_binds() -> None:
    assert meets_slo(INTERACTIVE, ok=True, ttft_s=0.4, tpot_s=0.04, e2e_s=3.0)
    assert not meets_slo(INTERACTIVE, ok=True, ttft_s=0.6, tpot_s=0.04, e2e_s=3.0)
    assert not meets_slo(INTERACTIVE, ok=True, ttft_s=0.4, tpot_s=0.06, e2e_s=3.0)
    assert not meets_slo(BATCH, ok=True, ttft_s=None, tpot_s=None, e2e_s=61.0)


def test_a_missing_ttft_is_judged_by_the_whole_answer() -> None:
    assert meets_slo(INTERACTIVE, ok=True, ttft_s=None, tpot_s=None, e2e_s=0.45)
    assert not meets_slo(INTERACTIVE, ok=True, ttft_s=None, tpot_s=None, e2e_s=0.55)


def test_a_missing_tpot_is_not_held_against_the_request() -> None:
    assert meets_slo(INTERACTIVE, ok=True, ttft_s=0.2, tpot_s=None, e2e_s=0.2)


def test_the_offline_report_judges_like_the_live_outcome() -> None:
    config = SloClassConfig(ttft_ms=500, tpot_ms=50)
    for ttft_s, tpot_s, e2e_s, outcome in [
        (0.4, 0.04, 3.0, "ok"),
        (0.6, 0.04, 3.0, "ok"),
        (None, None, 0.45, "ok"),
        (None, None, 0.55, "ok"),
        (0.1, 0.01, 0.2, "upstream_error"),
    ]:
        record = LoadRecord(
            request_id="r",
            tenant="t",
            slo_class="interactive",
            arrival_s=0.0,
            start_s=0.0,
            status=200 if outcome == "ok" else 502,
            outcome=outcome,
            ttft_s=ttft_s,
            tpot_s=tpot_s,
            e2e_s=e2e_s,
        )
        live = meets_slo(
            config.target("interactive"),
            ok=outcome == "ok",
            ttft_s=ttft_s,
            tpot_s=tpot_s,
            e2e_s=e2e_s,
        )
        assert record_meets_slo(record, config) is live
