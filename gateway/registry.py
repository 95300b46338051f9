"""Configured endpoints with their latest health and scraped engine state.

Readers get immutable `EndpointState` values; every update replaces the state (copy-on-write),
so a snapshot taken for one request never changes under it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gateway.settings import EndpointConfig
from policies.base import EngineSignals

FAILURE_THRESHOLD = 3  # consecutive failures before an endpoint is taken out of rotation
FAILURE_COOLDOWN_S = 5.0


@dataclass(frozen=True, slots=True)
class EndpointState:
    cooldown_until_s: float = 0.0
    consecutive_failures: int = 0
    quota_exhausted: bool = False
    engine: EngineSignals | None = None

    def available(self, now: float) -> bool:
        return not self.quota_exhausted and now >= self.cooldown_until_s


class Registry:
    def __init__(self, endpoints: Sequence[EndpointConfig]) -> None:
        self.endpoints = {e.id: e for e in endpoints}
        self._by_model: dict[str, tuple[EndpointConfig, ...]] = {}
        for endpoint in endpoints:
            for model in endpoint.models:
                self._by_model[model] = (*self._by_model.get(model, ()), endpoint)
        self._state = {e.id: EndpointState() for e in endpoints}

    def models(self) -> list[str]:
        return sorted(self._by_model)

    def serving(self, model: str) -> tuple[EndpointConfig, ...]:
        return self._by_model.get(model, ())

    def state(self, endpoint_id: str) -> EndpointState:
        return self._state[endpoint_id]

    def available(self, endpoint_id: str, now: float) -> bool:
        return self._state[endpoint_id].available(now)

    def record_success(self, endpoint_id: str) -> None:
        state = self._state[endpoint_id]
        if state.consecutive_failures or state.cooldown_until_s:
            self._state[endpoint_id] = replace(state, consecutive_failures=0, cooldown_until_s=0.0)

    def record_failure(
        self,
        endpoint_id: str,
        now: float,
        *,
        retry_after_s: float | None = None,
        quota_exhausted: bool = False,
    ) -> None:
        state = self._state[endpoint_id]
        failures = state.consecutive_failures + 1
        until = state.cooldown_until_s
        if failures >= FAILURE_THRESHOLD:
            until = max(until, now + FAILURE_COOLDOWN_S)
        if retry_after_s:
            until = max(until, now + retry_after_s)
        self._state[endpoint_id] = replace(
            state,
            consecutive_failures=failures,
            cooldown_until_s=until,
            quota_exhausted=state.quota_exhausted or quota_exhausted,
        )

    def set_engine(self, endpoint_id: str, signals: EngineSignals | None) -> None:
        self._state[endpoint_id] = replace(self._state[endpoint_id], engine=signals)
