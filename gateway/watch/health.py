"""Endpoint health: active probes plus a passive circuit breaker that every replica shares.

Probes: GET `<root>/health` for engines (`kind: vllm`), `<base_url>/models` with the provider's
API key for providers, or `<root><health_path>` when configured; a 2xx answer is healthy.

Both probe results and request outcomes (`HealthChecker.record`) drive the breaker in the store
(transitions in stats/breaker.py): `failure_threshold` consecutive failures, counted over all
replicas, open it for `cooldown_s`; then it is half-open and the first probe to claim the single
trial decides: success closes it, failure reopens it. A request outcome is a failure when no
response came or the status is 5xx (`is_failure`); a 4xx is the client's doing, and a 429 is a
cooldown (gateway/core/rate_limits.py), not a breaker failure.

`HealthChecker.run()` is started by the app lifespan. API keys go in a header, never in a log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import httpx
from redis.exceptions import RedisError

from gateway.config.settings import EndpointConfig
from gateway.state.breaker import BreakerPolicy, BreakerState, Phase
from gateway.state.store import StatsStore
from gateway.telemetry.metrics import log


def is_failure(status: int) -> bool:
    """Whether a request outcome counts against the breaker (status 0 = no response)."""
    return status == 0 or status >= 500


def probe_url(endpoint: EndpointConfig) -> str:
    if endpoint.health_path:
        return f"{endpoint.root_url}/{endpoint.health_path.lstrip('/')}"
    if endpoint.kind == "vllm":
        return f"{endpoint.root_url}/health"
    return f"{endpoint.base_url.rstrip('/')}/models"


def probe_headers(endpoint: EndpointConfig) -> dict[str, str]:
    return endpoint.auth_headers()


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ok: bool
    status: int  # 0 when no response came
    latency_s: float
    at_s: float


class Breakers:
    """The shared circuit breakers as this replica drives them, with `now` passed in.

    Only the store is awaited, so over a store that never suspends (memory) every call runs to
    completion at once: the offline simulator drives these same transitions in virtual time.
    """

    def __init__(self, store: StatsStore, policy: BreakerPolicy) -> None:
        self.store = store
        self.policy = policy
        self._phases: dict[str, Phase] = {}

    async def record(self, endpoint_id: str, *, ok: bool, now: float) -> BreakerState:
        """A request's or a probe's outcome (see `is_failure`)."""
        state = await self.store.record_result(endpoint_id, ok=ok, now=now, policy=self.policy)
        self._note_phase(endpoint_id, state.phase(now))
        return state

    async def probe_due(self, endpoint_ids: Sequence[str], now: float) -> list[str]:
        """The endpoints a probe may go to now (one store read): closed breakers, and half-open
        ones whose single trial this replica claims; an open breaker waits for its cooldown."""
        stats = await self.store.read(endpoint_ids, now=now)
        due = []
        for endpoint_id in endpoint_ids:
            phase = stats[endpoint_id].breaker.phase(now)
            self._note_phase(endpoint_id, phase)
            if phase == "closed" or (
                phase == "half_open"
                and await self.store.claim_trial(endpoint_id, now=now, policy=self.policy)
            ):
                due.append(endpoint_id)
        return due

    def _note_phase(self, endpoint_id: str, phase: Phase) -> None:
        """Log the breaker's phase changes as this replica sees them, not every outcome."""
        previous = self._phases.get(endpoint_id, "closed")
        self._phases[endpoint_id] = phase
        if phase != previous:
            level = logging.WARNING if phase == "open" else logging.INFO
            log.log(level, "circuit breaker of %s: %s -> %s", endpoint_id, previous, phase)


class HealthChecker:
    def __init__(
        self,
        endpoints: Sequence[EndpointConfig],
        store: StatsStore,
        client: httpx.AsyncClient,
        *,
        policy: BreakerPolicy | None = None,
        interval_s: float = 5.0,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """`clock` is wall time: breaker times are compared across replicas."""
        self.endpoints = list(endpoints)
        self.policy = policy or BreakerPolicy()
        self.breakers = Breakers(store, self.policy)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._store = store
        self._client = client
        self._clock = clock
        self._sleep = sleep
        self._probes: dict[str, ProbeResult] = {}

    @property
    def last_probes(self) -> Mapping[str, ProbeResult]:
        return dict(self._probes)

    async def record(self, endpoint_id: str, *, ok: bool, now: float) -> BreakerState:
        """A request's outcome, for passive breaking (see `is_failure`)."""
        return await self.breakers.record(endpoint_id, ok=ok, now=now)

    async def probe(self, endpoint: EndpointConfig) -> ProbeResult:
        started = time.perf_counter()
        try:
            response = await self._client.get(
                probe_url(endpoint), headers=probe_headers(endpoint), timeout=self.timeout_s
            )
            status = response.status_code
        except httpx.HTTPError as exc:
            log.debug("health probe of %s: %s", endpoint.id, type(exc).__name__)
            status = 0
        result = ProbeResult(
            200 <= status < 300, status, time.perf_counter() - started, self._clock()
        )
        self._probes[endpoint.id] = result
        return result

    async def check_once(self) -> None:
        """Probe every endpoint whose breaker lets a probe through."""
        due = set(await self.breakers.probe_due([e.id for e in self.endpoints], self._clock()))
        await asyncio.gather(*(self._check(e) for e in self.endpoints if e.id in due))

    async def run(self) -> None:
        store_down = False
        while True:
            try:
                await self.check_once()
                store_down = False
            except RedisError as exc:
                # The shared store is out; probing resumes when it is back.
                if not store_down:
                    log.warning("health checks paused, store unavailable: %s", exc)
                store_down = True
            await self._sleep(self.interval_s)

    async def _check(self, endpoint: EndpointConfig) -> None:
        result = await self.probe(endpoint)
        await self.record(endpoint.id, ok=result.ok, now=result.at_s)
