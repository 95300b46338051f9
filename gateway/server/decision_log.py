"""The recent routing decisions, for /admin/decisions and the dashboard."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from policies.base import Ranking, RouteRequest

DECISION_LOG_SIZE = 1000

# at_s, request, the model the client asked for (request.model is the one routed to: a
# fallback's, if one stood in), ranking, policy, queued, waited for fair share (later ones of
# its class first)
Logged = tuple[float, RouteRequest, str, Ranking, str, float, bool]


class DecisionLog:
    """The recent decisions, kept as they were made and turned into dicts only when read (by
    /admin/decisions and the dashboard), not once per request."""

    def __init__(self) -> None:
        self._entries: deque[Logged] = deque(maxlen=DECISION_LOG_SIZE)
        self.append = self._entries.append

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(self._entry, self._entries)

    def __reversed__(self) -> Iterator[dict[str, Any]]:
        return map(self._entry, reversed(self._entries))

    @staticmethod
    def _entry(logged: Logged) -> dict[str, Any]:
        at_s, request, requested, ranking, policy, waited_s, deferred = logged
        return {
            "at_s": at_s,
            "request_id": request.request_id,
            "tenant": request.tenant,
            "slo_class": request.slo.name,
            "model": request.model,
            "requested_model": requested,
            "prompt_tokens": request.prompt_tokens,
            "ranking": [s.endpoint_id for s in ranking.endpoints],
            "policy": policy,
            "predicted_ttft_s": ranking.predicted_ttft_s,
            "predicted_ttft_p95_s": ranking.predicted_ttft_p95_s,
            "predicted_cached_tokens": (
                round(request.cached_tokens.get(ranking.endpoints[0].endpoint_id, 0.0))
                if ranking.endpoints
                else 0
            ),
            "at_risk": ranking.at_risk,
            "reason": ranking.reason,
            "queued_s": round(waited_s, 4),
            "fairness_key": request.fairness_key or request.tenant,
            "waited_for_fairness": deferred,
            "steps": _steps(ranking),
        }


def _steps(ranking: Ranking) -> dict[str, dict[str, Any]]:
    """The ranked endpoints in a step change when the decision was made (policies/step_change):
    their statistics had jumped by `ratio` since `since_s`."""
    return {
        s.endpoint_id: {
            "ratio": round(s.latency.step_ratio, 3),
            "signal": s.latency.step_signal,
            "since_s": s.latency.step_at_s,
        }
        for s in ranking.endpoints
        if s.latency.step_signal
    }
