"""Dashboard logic without servers: explanations, sessions, health verdicts, counts, drawing."""

from __future__ import annotations

from typing import Any

from gateway.config.settings import SloClassConfig
from gateway.server.dashboard.board import judge, tally, tenant_served
from gateway.server.dashboard.explain import explain_decision
from gateway.server.dashboard.page import SPARK_H, SPARK_W, fmt, points, render_page
from gateway.server.dashboard.readings import Totals
from gateway.server.dashboard.routes import session_token, valid_session

INTERACTIVE = SloClassConfig(ttft_ms=500, tpot_ms=50, priority=10)
BATCH = SloClassConfig(deadline_ms=60000, sheddable=True)


def decision(**fields: Any) -> dict[str, Any]:
    base = {
        "policy": "slo_aware",
        "ranking": ["vllm-fast", "hosted"],
        "reason": "slo_met",
        "predicted_ttft_s": 0.08,
        "predicted_ttft_p95_s": 0.12,
        "queued_s": 0.0,
    }
    return base | fields


def test_explains_an_slo_aware_choice_against_the_class_target() -> None:
    assert explain_decision(decision(), INTERACTIVE) == (
        "slo_aware chose vllm-fast (of 2): predicted p95 TTFT 120 ms ≤ 500 ms target; "
        "the cheapest endpoint predicted to meet the SLO"
    )


def test_explains_an_at_risk_choice_and_a_queue_wait() -> None:
    text = explain_decision(
        decision(reason="slo_at_risk", predicted_ttft_p95_s=0.9, queued_s=0.25), INTERACTIVE
    )
    assert "predicted p95 TTFT 900 ms > 500 ms target" in text
    assert "no endpoint is predicted to meet the SLO" in text
    assert text.endswith("waited 250 ms in the admission queue")


def test_explains_a_wait_for_fair_share() -> None:
    text = explain_decision(
        decision(queued_s=0.3, waited_for_fairness=True, fairness_key="acme/a"), None
    )
    assert text.endswith("less-served keys of its class went first (acme/a waited for fair share)")
    assert "fair share" not in explain_decision(decision(waited_for_fairness=False), None)


def test_a_tenant_is_served_its_uncached_prompt_and_its_output() -> None:
    totals = Totals(
        {},
        {},
        {},
        tokens={("acme", "prompt"): 900, ("acme", "cached"): 600, ("acme", "completion"): 50},
        fair_waits={("chat", "acme"): 3, ("batch", "acme"): 1, ("chat", "zeta"): 7},
    )
    assert tenant_served(totals, "acme") == {"served_tokens": 350, "fair_waits": 4}


def test_explains_deadline_classes_and_policies_without_predictions() -> None:
    assert "(class deadline 60 s)" in explain_decision(decision(), BATCH)
    rotation = decision(
        policy="round_robin",
        ranking=["e1", "e2", "e3"],
        reason="rotation",
        predicted_ttft_s=None,
        predicted_ttft_p95_s=None,
    )
    assert explain_decision(rotation, None) == "round_robin chose e1 (of 3): next in rotation"
    assert explain_decision(decision(reason="new_reason", ranking=["e1"]), None).endswith(
        "; new_reason"
    )


def test_a_session_is_valid_only_for_its_key_and_until_it_expires() -> None:
    token = session_token("sk-admin", 2_000)
    assert "sk-admin" not in token
    assert valid_session("sk-admin", token, now_s=1_999.0)
    assert not valid_session("sk-admin", token, now_s=2_000.0)
    assert not valid_session("sk-rotated", token, now_s=1_000.0)
    forged = "9999999999." + token.partition(".")[2]
    assert not valid_session("sk-admin", forged, now_s=1_000.0)
    assert not valid_session("sk-admin", "garbage", now_s=1_000.0)


def view(**fields: Any) -> dict[str, Any]:
    base = {
        "kind": "vllm",
        "phase": "available",
        "last_probe": {"ok": True, "status": 200},
        "saturation": "open",
        "engine": {"kv_usage": 0.2},
        "estimate": {"step_signal": "", "step_ratio": 1.0},
    }
    return base | fields


def test_endpoints_out_of_rotation_or_failing_probes_are_degraded() -> None:
    assert judge(view()) == ("ok", "OK")
    assert judge(view(phase="breaker_open")) == ("degraded", "DEGRADED · breaker open")
    health, status = judge(view(last_probe={"ok": False, "status": 503}))
    assert health == "degraded" and "503" in status
    assert judge(view(saturation="saturated"))[0] == "warn"
    assert judge(view(engine=None))[0] == "warn"
    assert judge(view(kind="openai", engine=None)) == ("ok", "OK")


def test_an_endpoint_in_a_step_change_shows_as_slowed() -> None:
    stepped = view(estimate={"step_signal": "tpot", "step_ratio": 2.96})
    assert judge(stepped) == ("warn", "SLOWED · 3.0x its window (tpot)")


def test_an_engine_disagreeing_with_the_estimate_asks_for_a_check() -> None:
    estimate = {"step_signal": "", "step_ratio": 1.0, "tpot_mean_s": 0.02}
    slow = view(engine={"kv_usage": 0.2, "itl_recent_s": 0.07, "age_s": 0.3}, estimate=estimate)
    assert judge(slow) == ("warn", "CHECK · engine ITL 3.5x the gateway's TPOT (0.3 s old)")
    agreeing = view(engine={"kv_usage": 0.2, "itl_recent_s": 0.025}, estimate=estimate)
    assert judge(agreeing) == ("ok", "OK")


def test_explains_a_ranked_endpoint_in_a_step_change() -> None:
    steps = {"vllm-b": {"ratio": 3.04, "signal": "tpot", "since_s": 1.0}}
    text = explain_decision(decision() | {"steps": steps}, INTERACTIVE)
    assert text.endswith("; vllm-b is 3.0x slower than its window (tpot)")


def test_tally_sums_one_class_or_one_tenant() -> None:
    totals = Totals(
        slo={
            ("interactive", "acme", "met"): 8,
            ("interactive", "acme", "missed"): 2,
            ("batch", "zeta", "met"): 5,
        },
        shed={("batch", "zeta", "saturated"): 3, ("batch", "acme", "queue_full"): 1},
        queued={("batch",): 4},
        outcomes={
            ("interactive", "acme", "ok"): 10,
            ("interactive", "acme", "upstream_error"): 2,
            ("batch", "zeta", "rejected"): 3,
            ("", "", "client_error"): 4,  # never authenticated: nobody's
        },
    )
    interactive = tally(totals, slo_class="interactive")
    assert (interactive["requests"], interactive["attainment"]) == (10, 0.8)
    assert interactive["errors"] == {"upstream_error": 2} and interactive["errors_total"] == 2
    assert tally(totals, tenant="zeta")["errors"] == {"rejected": 3}
    batch = tally(totals, slo_class="batch")
    assert batch["shed"] == {"queue_full": 1, "saturated": 3} and batch["queued"] == 4
    zeta = tally(totals, tenant="zeta")
    assert zeta["shed"] == {"saturated": 3} and zeta["queued"] is None
    assert tally(Totals({}, {}, {}), tenant="none")["attainment"] is None


def test_sparkline_points_span_the_axis_and_skip_gaps() -> None:
    drawn = points([70.0, 85.0, 100.0], [0.2, None, 0.1], top=0.2, now_s=100.0, span_s=30.0)
    first, last = (tuple(map(float, p.split(","))) for p in drawn.split())
    assert first == (0.0, 9.0) and last[0] == SPARK_W
    assert 9.0 < last[1] < SPARK_H
    assert points([10.0], [0.1], top=0.1, now_s=100.0, span_s=30.0) == ""  # off the axis


def test_formats_match_what_the_script_prints() -> None:
    assert fmt(0.1234, "ms") == "123 ms" and fmt(0.0042, "ms") == "4.2 ms"
    assert fmt(0.456, "pct") == "46%" and fmt(None, "pct") == "–"
    assert fmt(3.0, "num") == "3" and fmt(2.5, "num") == "2.5"
    assert fmt({"saturated": 2, "queue_full": 1}, "reasons") == "saturated 2 · queue_full 1"
    assert fmt({}, "reasons") == "–"


def test_the_page_escapes_names_it_did_not_write() -> None:
    doc = {
        "layout": "x",
        "at_s": 100.0,
        "axis_s": 60.0,
        "policy": "<script>",
        "store": "memory",
        "shared_state": "up",
        "queue_depth": 0,
        "window_s": 10.0,
        "endpoints": [],
        "classes": [],
        "tenants": [],
        "keys": [
            {
                "id": "key_1",
                "tenant": "<i>acme</i>",
                "masked": "sk-sg-...abcd",
                "name": "<script>alert(1)</script>",
                "revoked_at": None,
                "usage": {"requests": 1, "spend_usd": 0.5, "last_used_hour": None},
            }
        ],
        "decisions": [
            {
                "at_s": 99.0,
                "request_id": "<img src=x>",
                "tenant": "acme",
                "slo_class": "interactive",
                "ranking": [],
                "explanation": "<b>",
            }
        ],
    }
    page = render_page(doc)
    assert "<script>" not in page.replace('<script src="dashboard/static/dashboard.js"', "")
    assert "&lt;img src=x&gt;" in page and "&lt;b&gt;" in page
    assert "&lt;i&gt;acme&lt;/i&gt;" in page and "&lt;script&gt;alert(1)" in page
