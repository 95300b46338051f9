"""Routing decisions in words, built from the router's decision log (`Router.decisions`).

    slo_aware chose vllm-a (of 3): predicted p95 TTFT 120 ms ≤ 1000 ms target; the cheapest
    endpoint predicted to meet the SLO; vllm-b is 3.0x slower than its window (tpot)

Built when the dashboard asks, never on the request path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config.settings import SloClassConfig

REASONS = {
    "slo_met": "the cheapest endpoint predicted to meet the SLO",
    "slo_at_risk": "no endpoint is predicted to meet the SLO, so the closest goes first",
    "cold": "no measured endpoint is predicted to meet the SLO; an unproven one shares the load",
    "owner": "the endpoint that stored the previous response (its only candidate)",
    "explore": "exploring an endpoint with too few observations to trust its estimate, or one "
    "idle whose statistics (measured under a past load) say it misses",
    "best_effort": "no endpoint can meet the SLO even idle (the request's own size): served "
    "best effort on the closest",
    "rotation": "next in rotation",
    "least_loaded": "the fewest requests in flight",
    "power_of_two": "the less loaded of two random picks",
    "latency": "the lowest recent latency",
    "cheapest": "the lowest price",
}
QUEUED_SHOWN_S = 0.01  # `queued_s` includes admission's own work; below this it is noise


def explain_decision(decision: Mapping[str, Any], slo: SloClassConfig | None) -> str:
    ranking = decision.get("ranking") or []
    chosen = ranking[0] if ranking else "no endpoint"
    head = f"{decision.get('policy') or 'the policy'} chose {chosen}"
    if len(ranking) > 1:
        head += f" (of {len(ranking)})"
    reason = decision.get("reason") or ""
    parts = [_prediction(decision, slo), REASONS.get(reason, reason)]
    queued_s = decision.get("queued_s") or 0.0
    if queued_s >= QUEUED_SHOWN_S:
        parts.append(f"waited {_ms(queued_s)} in the admission queue")
    if decision.get("waited_for_fairness"):
        key = decision.get("fairness_key") or decision.get("tenant")
        parts.append(f"less-served keys of its class went first ({key} waited for fair share)")
    parts += [
        _step(endpoint_id, step) for endpoint_id, step in (decision.get("steps") or {}).items()
    ]
    shown = [part for part in parts if part]
    return f"{head}: {'; '.join(shown)}" if shown else head


def _prediction(decision: Mapping[str, Any], slo: SloClassConfig | None) -> str:
    p95_s = decision.get("predicted_ttft_p95_s")
    value_s = p95_s if p95_s is not None else decision.get("predicted_ttft_s")
    if value_s is None:
        return ""
    text = f"predicted {'p95 ' if p95_s is not None else ''}TTFT {_ms(value_s)}"
    if slo is not None and slo.ttft_ms is not None:
        sign = "≤" if value_s * 1e3 <= slo.ttft_ms else ">"
        return f"{text} {sign} {slo.ttft_ms:g} ms target"
    if slo is not None and slo.deadline_ms is not None:
        return f"{text} (class deadline {slo.deadline_ms / 1e3:g} s)"
    return text


def _step(endpoint_id: str, step: Mapping[str, Any]) -> str:
    """A ranked endpoint in a step change (policies/step_change.py)."""
    return f"{endpoint_id} is {step['ratio']:.1f}x slower than its window ({step['signal']})"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.1f} ms"
