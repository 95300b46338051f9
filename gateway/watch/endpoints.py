"""Configured endpoints and what this replica knows about them right now.

Shared health (the circuit breaker, Retry-After cool-downs) lives in the stats store and reaches
the request path through `SharedView`; this registry keeps only what must act instantly on this
replica: a Retry-After cool-down seen a moment ago, or a provider out of quota. It also keeps
each endpoint's context window (`max_model_len`: the config's, else what its engine said).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gateway.config.settings import Api, EndpointConfig


@dataclass(frozen=True, slots=True)
class EndpointState:
    cooldown_until_s: float = 0.0
    cooldown_reason: str = ""

    def available(self, now: float) -> bool:
        return now >= self.cooldown_until_s


WITHDRAWN = "withdrawn"  # the cool-down reason of a member discovery removed


class Registry:
    def __init__(self, endpoints: Sequence[EndpointConfig]) -> None:
        self.endpoints = {e.id: e for e in endpoints}
        self._by_model: dict[tuple[str, Api], tuple[EndpointConfig, ...]] = {}
        self._index(endpoints)
        self._state = {e.id: EndpointState() for e in endpoints}
        self._learnt_windows: dict[str, int] = {}  # from vLLM's /v1/models

    def _index(self, endpoints: Sequence[EndpointConfig]) -> None:
        """Rebuilt whole on a change, so a request iterating `serving` keeps its tuple."""
        self._by_model = {}
        for endpoint in endpoints:
            for model in endpoint.models:
                for api in endpoint.apis:
                    key = (model, api)
                    self._by_model[key] = (*self._by_model.get(key, ()), endpoint)

    def add(self, endpoint: EndpointConfig) -> None:
        """A discovered member, in rotation at once (cold: no statistics yet)."""
        self.endpoints[endpoint.id] = endpoint
        self._state[endpoint.id] = EndpointState()
        self._index(self._serving())

    def withdraw(self, endpoint_id: str) -> None:
        """Out of rotation for new requests; known (by id) while requests to it finish."""
        self._state[endpoint_id] = EndpointState(float("inf"), WITHDRAWN)
        self._index(self._serving())

    def forget(self, endpoint_id: str) -> None:
        """A withdrawn member with nothing left in flight."""
        if self._state.get(endpoint_id, EndpointState()).cooldown_reason == WITHDRAWN:
            self.endpoints.pop(endpoint_id, None)
            self._state.pop(endpoint_id, None)

    def _serving(self) -> list[EndpointConfig]:
        return [
            e for e in self.endpoints.values() if self._state[e.id].cooldown_reason != WITHDRAWN
        ]

    def models(self, api: Api | None = None) -> list[str]:
        """The public model names, of every endpoint or of those serving `api`."""
        return sorted({m for m, served in self._by_model if api is None or served == api})

    def serving(self, model: str, api: Api = "chat") -> tuple[EndpointConfig, ...]:
        """The endpoints serving `model` through `api`."""
        return self._by_model.get((model, api), ())

    def window(self, endpoint_id: str) -> int | None:
        """The endpoint's context window in tokens: configured, else learnt (None: unknown)."""
        endpoint = self.endpoints.get(endpoint_id)
        configured = endpoint.max_model_len if endpoint is not None else None
        return configured or self._learnt_windows.get(endpoint_id)

    def learn_window(self, endpoint_id: str, tokens: int) -> None:
        self._learnt_windows[endpoint_id] = tokens

    def state(self, endpoint_id: str) -> EndpointState:
        return self._state[endpoint_id]

    def available(self, endpoint_id: str, now: float) -> bool:
        return self._state[endpoint_id].available(now)

    def cool_down(self, endpoint_id: str, until_s: float, reason: str) -> None:
        state = self._state[endpoint_id]
        if until_s > state.cooldown_until_s:
            self._state[endpoint_id] = replace(
                state, cooldown_until_s=until_s, cooldown_reason=reason
            )
