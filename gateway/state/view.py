"""Shared state as the request path sees it.

`SharedView` is a local copy of every endpoint's shared statistics, refreshed in the background
(one pipelined read per refresh), so building snapshots costs no round trip. In-flight counts are
fused: other replicas' leases as of the last refresh plus this replica's own, counted now.
Each refresh also follows every endpoint's step changes (policies/step_change.py) from its fast
window: a detected step makes the endpoint's statistics jump to the fast window's level.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from gateway.state.redis_store import FAILURES
from gateway.state.store import EndpointStats, StatsStore
from gateway.telemetry.metrics import log
from policies.step_change import Step, StepParams, follow, jumped

_NO_STATS = EndpointStats()


class SharedView:
    """Every endpoint's shared stats as of the last background refresh, plus local in-flight."""

    def __init__(
        self,
        store: StatsStore,
        endpoint_ids: Sequence[str],
        refresh_s: float,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock` is wall time live; the offline simulator passes its virtual clock."""
        self.store = store
        self.clock = clock
        self.endpoint_ids = list(endpoint_ids)
        self.refresh_s = refresh_s
        self.local: Counter[str] = Counter()
        self.local_tokens: Counter[str] = Counter()  # KV footprint of this replica's in-flight
        # uncached prompt tokens of this replica's in-flight before their first token
        self.local_prefill: Counter[str] = Counter()
        self.refreshed_at_s: float | None = None  # wall clock of the last good refresh
        self._shared: Mapping[str, EndpointStats] = {}
        self._local_at_refresh: Counter[str] = Counter()
        self.step_params = StepParams()
        self.steps: dict[str, Step] = {}  # endpoint -> the step it is in now

    async def refresh(self) -> None:
        """One store read; over a store that never suspends (memory), it finishes at once."""
        local = self.local.copy()
        now = self.clock()
        shared = await self.store.read(self.endpoint_ids, now=now)
        self._shared = {eid: self._stepped(eid, stats, now) for eid, stats in shared.items()}
        self._local_at_refresh = local
        self.refreshed_at_s = now

    def _stepped(self, endpoint_id: str, stats: EndpointStats, now: float) -> EndpointStats:
        step = follow(self.steps.get(endpoint_id), stats.latency, self.step_params, now)
        if step is None:
            self.steps.pop(endpoint_id, None)
            return stats
        self.steps[endpoint_id] = step
        latency = jumped(stats.latency, step)
        return EndpointStats(stats.in_flight, latency, stats.breaker, stats.cooldown_until_s)

    async def run(self) -> None:
        """Owned by the app lifespan."""
        while True:
            try:
                await self.refresh()
            except FAILURES as exc:
                log.debug("shared view refresh failed: %r", exc)
            await asyncio.sleep(self.refresh_s)

    def stats(self, endpoint_id: str) -> EndpointStats:
        shared = self._shared.get(endpoint_id, _NO_STATS)
        in_flight = self.in_flight(endpoint_id, shared)
        # Built directly: dataclasses.replace costs several times more, per endpoint per request.
        return EndpointStats(in_flight, shared.latency, shared.breaker, shared.cooldown_until_s)

    def shared(self, endpoint_id: str) -> EndpointStats:
        """As of the last refresh, in-flight included (use `in_flight` for the fused count)."""
        return self._shared.get(endpoint_id, _NO_STATS)

    def in_flight(self, endpoint_id: str, shared: EndpointStats) -> int:
        """Other replicas' leases as of the refresh (`shared`), plus this replica's now."""
        others = shared.in_flight - self._local_at_refresh[endpoint_id]
        return (others if others > 0 else 0) + self.local[endpoint_id]

    def started(self, endpoint_id: str, tokens: int, prefill: int = 0) -> None:
        self.local[endpoint_id] += 1
        self.local_tokens[endpoint_id] += tokens
        self.local_prefill[endpoint_id] += prefill

    def prefilled(self, endpoint_id: str, prefill: int) -> None:
        """A request's first token came: its `prefill` tokens are computed."""
        self.local_prefill[endpoint_id] -= prefill

    def finished(self, endpoint_id: str, tokens: int, prefill: int = 0) -> None:
        """`prefill`: what of the request was still before its first token."""
        self.local[endpoint_id] -= 1
        self.local_tokens[endpoint_id] -= tokens
        self.local_prefill[endpoint_id] -= prefill
