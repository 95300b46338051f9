"""The dashboard's data: one JSON document, served at GET /admin/dashboard.json for the page's
polling and for scripts, and rendered server-side into the page's first state.

    at_s, policy, store, shared_state, queue_depth
    sample_s, span_s    the history ring's interval and span; window_s: how far back the
                        windowed counts reach right now (grows to span_s after a restart);
                        axis_s: the sparklines' time axis (at least a minute)
    layout              changes when the endpoints, classes or tenants do (the page reloads)
    endpoints[]         what GET /admin/endpoints shows per endpoint, plus
                        health (ok | warn | degraded) and status (text; a step change in the
                        estimate shows as "SLOWED · 3.0x its window (tpot)", an engine whose
                        own recent inter-token latency disagrees with the estimate as CHECK),
                        predicted {ttft_mean_s, ttft_p95_s, tpot_mean_s, tpot_p95_s, prompt_tokens}
                        for a typical request, and history {at_s[], <Point field>[]} (sparklines)
    classes[]           name, ttft_ms, tpot_ms, deadline_ms, priority, sheddable, and
                        window / total: {requests, met, missed, attainment, shed {reason: n},
                        shed_total, queued, errors {outcome: n}, errors_total, missed_by}:
                        requests are the judged ones; errors count every request whose outcome
                        was not ok (slo_gateway_requests_total: refused, failed, cancelled);
                        missed_by {ttft, tpot, e2e, not_ok, shed}: the judged misses by the
                        target missed (gateway/core/slo.py; e2e: the deadline or a whole
                        answer's budget), the requests not ok but not refused, and the refused
    tenants[]           name, allowed_classes, window / total as for classes (queued: null),
                        plus spend_usd (at the endpoints' prices), cost_per_1k_met_usd
                        (spend per thousand SLO-met requests; null before any is met),
                        served_tokens (uncached prompt + output) and fair_waits (requests
                        that waited while later ones of their class went first); and
                        fair_share_tokens {class: fairness counter, its sub-tenants' added}
                        as the shared store last answered (policies/fair_share.py)
    decisions[]         newest first: the router's decision log entries plus `explanation`

Endpoint fields are merged over replicas (the store); class and tenant counts are this
replica's (its Prometheus counters).
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway.server import ops
from gateway.server.dashboard import readings
from gateway.server.dashboard.explain import explain_decision
from gateway.server.dashboard.history import History
from gateway.server.dashboard.readings import Key, Totals
from gateway.server.runtime import Runtime
from policies.estimate import Estimator

DECISIONS_SHOWN = 15
PHASES = {
    "breaker_open": "breaker open",
    "breaker_half_open": "breaker half-open, trial pending",
    "cooling_down": "cooling down",
    "retry_after": "cooling down (Retry-After)",
    "insufficient_quota": "provider quota exhausted",
    "rate_limit_exhausted": "provider rate limit exhausted",
}


def document(runtime: Runtime, history: History) -> dict[str, Any]:
    now = time.time()
    current = readings.totals(runtime.metrics)
    oldest = history.oldest()
    window = current.minus(oldest.totals) if oldest else current
    return {
        "at_s": now,
        "policy": runtime.pipeline.policy_name,
        "store": runtime.store_kind,
        "shared_state": "up" if runtime.shared_state_up else "degraded_to_local",
        "queue_depth": readings.gauge_value(runtime.metrics.queue_depth),
        "sample_s": history.interval_s,
        "span_s": history.span_s,
        "axis_s": history.axis_s(now),
        "window_s": round(now - oldest.at_s, 1) if oldest else 0.0,
        "layout": layout(runtime),
        "endpoints": endpoints(runtime, history),
        "classes": classes(runtime, window, current),
        "tenants": tenants(runtime, window, current),
        "decisions": decisions(runtime),
    }


def layout(runtime: Runtime) -> str:
    config = runtime.config
    parts = [
        *runtime.registry.endpoints,
        *(f"{name}:{klass.model_dump_json()}" for name, klass in config.classes.items()),
        *runtime.keyring.tenants,  # the config's and the admin API's
    ]
    return hashlib.blake2s("\n".join(parts).encode(), digest_size=6).hexdigest()


def endpoints(runtime: Runtime, history: History) -> list[dict[str, Any]]:
    model = readings.estimator(runtime)
    covered = readings.endpoint_coverage(runtime.metrics)
    entries = []
    for view in ops.endpoint_views(runtime):
        health, status = judge(view)
        entries.append(
            view
            | {
                "health": health,
                "status": status,
                "predicted": predicted(runtime, model, view["id"]),
                "coverage": covered.get(view["id"], {}),
                "history": history.series(view["id"]),
            }
        )
    return entries


def judge(view: dict[str, Any]) -> tuple[str, str]:
    """(health, status text): degraded = out of rotation or failing probes."""
    phase = view["phase"]
    if phase != "available":
        return "degraded", f"DEGRADED · {PHASES.get(phase, phase.replace('_', ' '))}"
    probe = view["last_probe"]
    if probe is not None and not probe["ok"]:
        return "degraded", f"DEGRADED · health probe failed ({probe['status'] or 'no answer'})"
    step = view["estimate"]
    if step["step_signal"]:
        return "warn", f"SLOWED · {step['step_ratio']:.1f}x its window ({step['step_signal']})"
    if view["saturation"] != "open":
        return "warn", f"BUSY · {view['saturation']}"
    engine = view["engine"]
    disagreement = cross_check(engine, view["estimate"])
    if disagreement:
        return "warn", disagreement
    if view["kind"] == "vllm" and (engine is None or engine["kv_usage"] is None):
        return "warn", "OK · no fresh engine metrics"
    return "ok", "OK"


CROSS_CHECK_RATIO = 2.0  # engine and gateway disagree when one is this many times the other


def cross_check(engine: dict[str, Any] | None, estimate: dict[str, Any]) -> str:
    """The engine's own recent inter-token latency against the gateway's TPOT estimate: a
    status when they disagree by CROSS_CHECK_RATIO or more ("" otherwise, or unknown)."""
    itl_s = engine.get("itl_recent_s") if engine else None
    tpot_s = estimate.get("tpot_mean_s")
    if not itl_s or not tpot_s:
        return ""
    ratio = itl_s / tpot_s
    if 1 / CROSS_CHECK_RATIO < ratio < CROSS_CHECK_RATIO:
        return ""
    age_s = (engine or {}).get("age_s") or 0.0
    return f"CHECK · engine ITL {ratio:.1f}x the gateway's TPOT ({age_s:.1f} s old)"


def predicted(runtime: Runtime, model: Estimator, endpoint_id: str) -> dict[str, Any]:
    prediction = readings.predict(runtime, model, endpoint_id)
    return {
        "ttft_mean_s": prediction.ttft_mean_s,
        "ttft_p95_s": prediction.ttft_p95_s,
        "tpot_mean_s": prediction.tpot_mean_s,
        "tpot_p95_s": prediction.tpot_p95_s,
        "prompt_tokens": readings.typical_request(runtime, model, endpoint_id).prompt_tokens,
    }


def tally(
    totals: Totals, *, slo_class: str | None = None, tenant: str | None = None
) -> dict[str, Any]:
    """Counts for one class or one tenant (summing over the other)."""

    def mine(key: tuple[str, ...]) -> bool:
        return (slo_class is None or key[0] == slo_class) and (tenant is None or key[1] == tenant)

    met = sum(n for key, n in totals.slo.items() if mine(key) and key[2] == "met")
    missed = sum(n for key, n in totals.slo.items() if mine(key) and key[2] == "missed")
    shed = by_last_label(totals.shed, mine)
    errors = by_last_label(totals.outcomes, lambda key: mine(key) and key[2] != "ok")
    queued = None if slo_class is None else round(totals.queued.get((slo_class,), 0.0))
    targets = by_last_label(totals.missed, mine)
    refused = sum(shed.values())
    return {
        "requests": round(met + missed),
        "met": round(met),
        "missed": round(missed),
        "attainment": met / (met + missed) if met + missed else None,
        "shed": shed,
        "shed_total": refused,
        "queued": queued,
        "errors": errors,
        "errors_total": sum(errors.values()),
        "missed_by": {target: targets.get(target, 0) for target in ("ttft", "tpot", "e2e")}
        | {"not_ok": sum(errors.values()) - errors.get("rejected", 0), "shed": refused},
    }


def by_last_label(counts: Mapping[Key, float], mine: Callable[[Key], bool]) -> dict[str, int]:
    """Counts of the keys `mine` keeps, by their last label (a reason, an outcome)."""
    summed: dict[str, int] = {}
    for key, n in counts.items():
        if mine(key) and n:
            summed[key[-1]] = summed.get(key[-1], 0) + round(n)
    return dict(sorted(summed.items()))


def classes(runtime: Runtime, window: Totals, total: Totals) -> list[dict[str, Any]]:
    return [
        {"name": name}
        | klass.model_dump()
        | {
            "window": tally(window, slo_class=name),
            "total": tally(total, slo_class=name),
        }
        for name, klass in runtime.config.classes.items()
    ]


def tenants(runtime: Runtime, window: Totals, total: Totals) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "allowed_classes": tenant.allowed_classes,
            "window": tally(window, tenant=name)
            | spend(window, name)
            | tenant_served(window, name),
            "total": tally(total, tenant=name) | spend(total, name) | tenant_served(total, name),
            "fair_share_tokens": fair_share(runtime, name),
        }
        for name, tenant in runtime.keyring.tenants.items()
    ]


def tenant_served(totals: Totals, tenant: str) -> dict[str, int]:
    """What the tenant was served (fair share counts it, unweighted) and how often one of its
    requests waited for fairness."""
    tokens = {key[1]: n for key, n in totals.tokens.items() if key[0] == tenant}
    uncached = tokens.get("prompt", 0.0) - tokens.get("cached", 0.0)
    waits = sum(n for key, n in totals.fair_waits.items() if key[1] == tenant)
    return {
        "served_tokens": round(uncached + tokens.get("completion", 0.0)),
        "fair_waits": round(waits),
    }


def fair_share(runtime: Runtime, tenant: str) -> dict[str, int]:
    """The tenant's fairness counter per class (its own key and its sub-tenants')."""
    found: dict[str, int] = {}
    for slo_class, counters in runtime.admission.control.fair.shared.items():
        mine = [n for key, n in counters.tokens.items() if key.split("/", 1)[0] == tenant]
        if mine:
            found[slo_class] = round(sum(mine))
    return found


def spend(totals: Totals, tenant: str) -> dict[str, float | None]:
    """What the tenant's requests cost, and per thousand that met their SLO: the price of
    the service level actually delivered."""
    usd = totals.cost.get((tenant,), 0.0)
    met = sum(n for key, n in totals.slo.items() if key[1] == tenant and key[2] == "met")
    return {"spend_usd": usd, "cost_per_1k_met_usd": 1000 * usd / met if met else None}


def decisions(runtime: Runtime) -> list[dict[str, Any]]:
    newest = itertools.islice(reversed(runtime.decisions), DECISIONS_SHOWN)
    slo = runtime.config.classes
    return [d | {"explanation": explain_decision(d, slo.get(d["slo_class"]))} for d in newest]
