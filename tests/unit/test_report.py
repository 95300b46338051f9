"""The SLO report: what counts as meeting the SLO, the per-group numbers, the verdict, files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import SloClassConfig
from gateway.offline import render
from gateway.offline import report_charts as charts
from gateway.offline.records import LoadRecord, classify, read_records, write_records
from gateway.offline.report import RunFacts, percentile, record_meets_slo, summarize
from gateway.offline.scenario import (
    Check,
    EngineSpec,
    ProviderSpec,
    Scenario,
    ScenarioTenant,
    Traffic,
)
from gateway.offline.workload import RateShape
from gateway.sim.fleet import MemberPrice

CHAT = SloClassConfig(ttft_ms=500, tpot_ms=50)
BATCH = SloClassConfig(deadline_ms=10_000, sheddable=True)


def scenario(checks: list[Check] | None = None, **changes: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "report",
        "description": "report test",
        "duration_s": 10.0,
        "classes": {"chat": CHAT, "batch": BATCH},
        "tenants": {
            "a": ScenarioTenant(allowed_classes=["chat", "batch"]),
            "b": ScenarioTenant(allowed_classes=["chat"]),
        },
        "traffic": [Traffic(tenant="a", slo_class="chat", shape=RateShape.constant(1, 0, 10))],
        "engines": [EngineSpec(id="e", price=MemberPrice(input_per_1m=1.0, output_per_1m=2.0))],
        "providers": [
            ProviderSpec(id="p", price=MemberPrice(input_per_1m=10.0, output_per_1m=30.0))
        ],
        "checks": checks or [],
    }
    return Scenario(**(base | changes))


def record(n: int, **fields: Any) -> LoadRecord:
    base: dict[str, Any] = {
        "request_id": str(n),
        "tenant": "a",
        "slo_class": "chat",
        "arrival_s": float(n),
        "start_s": float(n),
        "status": 200,
        "outcome": "ok",
        "endpoint": "e",
        "attempts": 1,
        "prompt_tokens": 1000,
        "output_tokens": 11,
        "ttft_s": 0.2,
        "tpot_s": 0.02,
        "e2e_s": 0.4,
    }
    return LoadRecord(**(base | fields))


RECORDS = [
    record(0),
    record(1, ttft_s=0.9),  # too slow to first token
    record(2, tpot_s=0.08),  # too slow per token
    record(
        3,
        outcome="shed",
        status=429,
        reason="saturated",
        endpoint="",
        ttft_s=None,
        tpot_s=None,
        e2e_s=None,
        output_tokens=0,
        attempts=0,
    ),
    record(4, outcome="error", status=502, reason="upstream_failed", ttft_s=None, tpot_s=None),
    record(5, slo_class="batch", endpoint="p", ttft_s=3.0, tpot_s=0.5, e2e_s=8.0),
    record(6, tenant="b", ttft_s=0.1, output_tokens=1, tpot_s=None),
    record(7, slo_class="batch", e2e_s=12.0),  # missed its deadline
]


def test_meeting_the_slo_means_every_target_of_the_class() -> None:
    assert record_meets_slo(record(0), CHAT)
    assert not record_meets_slo(record(0, ttft_s=0.6), CHAT)
    assert not record_meets_slo(record(0, tpot_s=0.051), CHAT)
    assert record_meets_slo(record(0, output_tokens=1, tpot_s=None), CHAT)  # no TPOT for one token
    assert not record_meets_slo(record(0, outcome="shed"), CHAT)
    assert record_meets_slo(record(0, ttft_s=9.0, e2e_s=9.5), BATCH)
    assert not record_meets_slo(record(0, e2e_s=10.5), BATCH)


def test_outcomes_come_from_status_gateway_reason_and_stream_end() -> None:
    assert classify(200, None, completed=True) == "ok"
    assert classify(200, None, completed=False) == "error"  # broken or empty stream
    assert classify(429, "tenant_rate_limited", completed=False) == "shed"
    assert classify(503, "deadline_unreachable", completed=False) == "shed"
    assert classify(503, None, completed=False) == "error"  # no reason header: not on purpose
    assert classify(502, "upstream_failed", completed=False) == "error"


def test_percentiles_interpolate_between_order_statistics() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 95) == pytest.approx(3.85)


def test_groups_count_rates_attainment_goodput_and_cost() -> None:
    summary = summarize(scenario(), RECORDS, RunFacts("p1", "offline", preemptions=3))
    everything, chat = summary.groups["all"], summary.groups["class:chat"]
    assert (everything.count, everything.ok, everything.shed, everything.errors) == (8, 6, 1, 1)
    assert everything.admitted == 7
    assert everything.attainment == pytest.approx(3 / 8)  # requests 0, 5 and 6
    assert everything.goodput_rps == pytest.approx(3 / 10)
    assert chat.attainment == pytest.approx(2 / 6) and chat.shed_rate == pytest.approx(1 / 6)
    assert summary.groups["tenant:b"].goodput_share == pytest.approx(1 / 3)
    assert summary.groups["class:batch/tenant:a"].count == 2
    assert chat.ttft_p50_s == pytest.approx(0.2)
    # cost: ok requests only, at their endpoint's prices (1000 in, 11 out; 1 out for request 6)
    engine = (1000 * 1.0 + 11 * 2.0) / 1e6
    assert everything.cost == pytest.approx(
        4 * engine + (1000 * 1.0 + 1 * 2.0) / 1e6 + (1000 * 10.0 + 11 * 30.0) / 1e6
    )
    assert everything.reasons == {"saturated": 1, "upstream_failed": 1}  # of those not ok
    assert summary.run["preemptions"] == 3


def test_cost_bills_cached_prompt_tokens_at_the_cached_rate_as_live_accounting_does() -> None:
    cached_price = MemberPrice(input_per_1m=10.0, output_per_1m=30.0, cached_input_per_1m=1.0)
    hosted = [ProviderSpec(id="p", price=cached_price)]
    records = [
        record(0, endpoint="p", cached_tokens=800),  # 200 uncached at 10, 800 cached at 1
        record(1, endpoint="e", cached_tokens=800),  # no cached rate: input price for all 1000
    ]
    summary = summarize(scenario(providers=hosted), records, RunFacts("p1", "offline"))
    hosted_cost = (200 * 10.0 + 800 * 1.0 + 11 * 30.0) / 1e6
    engine_cost = (1000 * 1.0 + 11 * 2.0) / 1e6
    assert summary.groups["all"].cost == pytest.approx(hosted_cost + engine_cost)
    uncached = summarize(scenario(providers=hosted), [record(0, endpoint="p")], RunFacts("p", "o"))
    assert uncached.groups["all"].cost == pytest.approx((1000 * 10.0 + 11 * 30.0) / 1e6)
    assert summary.run["attempts_ratio"] == pytest.approx(1.0)


def test_checks_decide_the_verdict() -> None:
    checks = [
        Check(metric="attainment", op=">=", value=0.3, slo_class="chat"),
        Check(metric="shed_rate", op="<=", value=0.0, tenant="b"),
        Check(metric="preemptions", op="<=", value=0),
    ]
    summary = summarize(scenario(checks), RECORDS, RunFacts("p1", "offline", preemptions=1))
    assert [ok for _, _, ok in summary.checks] == [True, True, False]
    assert not summary.passed
    assert summary.checks[2][0] == "preemptions[all] <= 0"
    unknown = summarize(
        scenario([Check(metric="attainment", op=">=", value=0, slo_class="x")]),
        RECORDS,
        RunFacts("p1", "offline"),
    )
    assert not unknown.passed  # a check on a group without requests cannot pass


def test_recovery_is_the_first_window_back_at_target() -> None:
    spec = scenario(recovery_from_s=2.0, recovery_target=0.9)
    late = [record(n, arrival_s=n + 0.5, ttft_s=0.9 if n < 5 else 0.1) for n in range(10)]
    summary = summarize(spec, late, RunFacts("p1", "offline"))
    assert summary.run["recovery_s"] == pytest.approx(3.0)
    assert [w.attainment["chat"] for w in summary.timeline[:6]] == [0, 0, 0, 0, 0, 1]
    never = summarize(spec, [record(n, ttft_s=0.9) for n in range(10)], RunFacts("p1", "offline"))
    assert never.run["recovery_s"] is None


def test_the_timeline_shows_load_in_flight() -> None:
    steady = [record(n, arrival_s=n, start_s=n, e2e_s=2.0) for n in range(10)]
    summary = summarize(scenario(), steady, RunFacts("p1", "offline"))
    assert [w.arrivals for w in summary.timeline] == [1] * 10
    assert summary.timeline[5].in_flight == pytest.approx(2.0)


def test_each_window_counts_its_arrivals_met_refused_and_late() -> None:
    arrivals = [
        record(0),
        record(1, ttft_s=0.9),  # answered late
        record(2, outcome="shed", status=503, ttft_s=None, tpot_s=None, e2e_s=None),
        record(3, arrival_s=5.0),
    ]
    summary = summarize(scenario(window_s=5.0), arrivals, RunFacts("p1", "offline"))
    first, second = summary.timeline
    assert (first.met, first.refused, first.late) == (1, 1, 1)
    assert (second.met, second.refused, second.late) == (1, 0, 0)
    text = render.markdown(summary)
    assert "| from s | offered | served | met | refused | late |" in text
    assert "| 0 | 3 | 3 | 1 | 1 | 1 |" in text  # record 3 arrives at 5 s, done before


def test_reports_are_written_as_markdown_json_and_png(tmp_path: Path) -> None:
    checks = [Check(metric="attainment", op=">=", value=0.9)]
    summary = summarize(scenario(checks), RECORDS, RunFacts("least_loaded", "live"))
    render.write_report(summary, tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# report: FAIL")
    assert "| class:chat | 6 | 66.7% | 16.7% | 16.7% | 200/795/879 |" in text
    assert "- FAIL `attainment[all] >= 0.9` (observed 0.375)" in text
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["groups"]["all"]["count"] == 8 and data["driver"] == "live"
    if charts.available():
        png = charts.report_chart(summary, tmp_path / "report.png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_comparison_has_one_row_per_policy_and_class(tmp_path: Path) -> None:
    spec = scenario([Check(metric="error_rate", op="<=", value=0.5)])
    summaries = [summarize(spec, RECORDS, RunFacts(p, "offline")) for p in ("a", "b")]
    render.write_comparison(summaries, tmp_path)
    rows = json.loads((tmp_path / "comparison.json").read_text())
    assert [(r["policy"], r["class"]) for r in rows] == [
        ("a", "all"),
        ("a", "batch"),
        ("a", "chat"),
        ("b", "all"),
        ("b", "batch"),
        ("b", "chat"),
    ]
    assert rows[0]["checks"] == "1/1"
    assert "| b | chat | 6 | 33.3% |" in (tmp_path / "comparison.md").read_text()
    if charts.available():
        charts.comparison_chart(summaries, tmp_path / "comparison.png")
        assert (tmp_path / "comparison.png").stat().st_size > 1000


def test_records_round_trip_through_jsonl(tmp_path: Path) -> None:
    write_records(tmp_path / "r.jsonl", RECORDS)
    assert read_records(tmp_path / "r.jsonl") == RECORDS


def test_a_decision_is_written_only_when_the_gateway_gave_one(tmp_path: Path) -> None:
    routed, refused = record(0, decision="slo_met"), record(1, status=429, outcome="shed")
    write_records(tmp_path / "r.jsonl", [routed, refused])
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert '"decision": "slo_met"' in lines[0] and "decision" not in lines[1]
    assert read_records(tmp_path / "r.jsonl") == [routed, refused]
