"""In-flight leases without a round trip on the request path.

This replica's count changes at once (`SharedView.started/finished`); the shared lease is taken
and dropped off the request path: queued for the write-behind (or written to memory) at once
when the store allows (`state.writes_at_once`), else in background tasks, the drop chained
after the take so they never cross. Other
replicas see the lease at their next view refresh, which is as fresh as they could read it.
Leases held past a third of their TTL are refreshed (`run`), so a stream longer than the TTL
stays counted by every replica, while a crashed replica's leases still expire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gateway.state.background import Background, run_now
from gateway.state.resilient import writes_at_once
from gateway.state.store import StatsStore
from gateway.state.view import SharedView
from gateway.telemetry.metrics import Metrics
from policies.base import Prediction


class LocalLeases:
    """This replica's side of its leases, synchronous: counted in the view at once, each with
    the gateway-wide in-flight count it was taken under (the load its TPOT is measured under)
    and the policy's prediction for it (what its outcome is measured against).
    `LeaseBook` adds the shared lease in the store; the offline simulator, whose store never
    suspends, takes and drops that one inline."""

    def __init__(self, view: SharedView) -> None:
        self.view = view
        # -> (KV footprint, in-flight when taken, uncached prompt tokens before the first
        # token, the prediction)
        self._held: dict[tuple[str, str], tuple[int, int, int, Prediction | None]] = {}

    def take(
        self,
        endpoint_id: str,
        request_id: str,
        tokens: int,
        prefill: int = 0,
        predicted: Prediction | None = None,
    ) -> None:
        """`tokens`: the KV footprint; `prefill`: the uncached prompt tokens it computes first;
        `predicted`: the policy's prediction for it there."""
        self.view.started(endpoint_id, tokens, prefill)
        in_flight = self.view.in_flight(endpoint_id, self.view.shared(endpoint_id))
        self._held[(endpoint_id, request_id)] = (tokens, in_flight, prefill, predicted)

    def first_token(self, endpoint_id: str, request_id: str) -> None:
        """The request's first token came: its prefill is no longer ahead of others."""
        held = self._held.get((endpoint_id, request_id))
        if held is not None and held[2]:
            self.view.prefilled(endpoint_id, held[2])
            self._held[(endpoint_id, request_id)] = (held[0], held[1], 0, held[3])

    def predicted(self, endpoint_id: str, request_id: str) -> Prediction | None:
        """The prediction the lease was taken under (None: none was made)."""
        held = self._held.get((endpoint_id, request_id))
        return held[3] if held else None

    def in_flight_when_taken(self, endpoint_id: str, request_id: str) -> int:
        """Gateway-wide in-flight on the endpoint when this lease was taken, itself included."""
        held = self._held.get((endpoint_id, request_id))
        return held[1] if held else 0

    def drop(self, endpoint_id: str, request_id: str) -> bool:
        """False when the lease was never taken or is already dropped."""
        held = self._held.pop((endpoint_id, request_id), None)
        if held is None:
            return False
        self.view.finished(endpoint_id, held[0], held[2])
        return True


class LeaseBook:
    def __init__(
        self,
        store: StatsStore,
        view: SharedView,
        metrics: Metrics,
        background: Background,
        ttl_s: float,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock`: wall time (unix s) the leases' expiries are stamped with."""
        self.store = store
        self.view = view
        self.metrics = metrics
        self.background = background
        self.ttl_s = ttl_s  # outlives any sane request; a dead replica's leases expire
        self.clock = clock
        self.local = LocalLeases(view)
        # The shared takes: a task to chain the drop after, or None when written at once.
        self._taking: dict[tuple[str, str], asyncio.Task[int] | None] = {}
        self._at_once = writes_at_once(store)
        self._refreshed_at: dict[tuple[str, str], float] = {}  # when each lease was last taken

    def take(
        self,
        endpoint_id: str,
        request_id: str,
        tokens: int,
        prefill: int = 0,
        predicted: Prediction | None = None,
    ) -> None:
        """Lease `endpoint_id` for a request whose KV footprint is `tokens` and which computes
        `prefill` uncached prompt tokens before its first token, predicted as `predicted`."""
        self.local.take(endpoint_id, request_id, tokens, prefill, predicted)
        self.metrics.in_flight.labels(endpoint_id).inc()
        now = self.clock()
        acquiring = self.store.acquire(endpoint_id, request_id, ttl_s=self.ttl_s, now=now)
        if self._at_once:
            run_now(acquiring)
            self._taking[(endpoint_id, request_id)] = None
        else:
            self._taking[(endpoint_id, request_id)] = self.background.spawn(acquiring)
        self._refreshed_at[(endpoint_id, request_id)] = now

    def in_flight_when_taken(self, endpoint_id: str, request_id: str) -> int:
        return self.local.in_flight_when_taken(endpoint_id, request_id)

    def predicted(self, endpoint_id: str, request_id: str) -> Prediction | None:
        return self.local.predicted(endpoint_id, request_id)

    def first_token(self, endpoint_id: str, request_id: str) -> None:
        self.local.first_token(endpoint_id, request_id)

    def drop(self, endpoint_id: str, request_id: str) -> None:
        key = (endpoint_id, request_id)
        if key not in self._taking:
            return  # never taken, or already dropped
        taking = self._taking.pop(key)
        self._refreshed_at.pop(key, None)
        if not self.local.drop(endpoint_id, request_id):
            return
        self.metrics.in_flight.labels(endpoint_id).dec()
        if taking is None:  # the take is written already
            run_now(self.store.release(endpoint_id, request_id, now=self.clock()))
        else:
            self.background.spawn(self._drop(endpoint_id, request_id, taking))

    async def _drop(self, endpoint_id: str, request_id: str, taking: asyncio.Task[int]) -> None:
        if not taking.done():  # usually done by now: asyncio.wait costs a future and callbacks
            await asyncio.wait({taking})
        await self.store.release(endpoint_id, request_id, now=self.clock())

    async def run(self) -> None:
        """Owned by the app lifespan: every third of the TTL, `renew` what is due."""
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            self.renew(self.clock())

    def renew(self, now: float) -> None:
        """Take again, in the background, every lease last taken a third of its TTL or more
        before `now`."""
        period_s = self.ttl_s / 3
        for key, taken_at in list(self._refreshed_at.items()):
            if now - taken_at >= period_s:
                self._refreshed_at[key] = now
                self.background.spawn(self._refresh(*key, now))

    async def _refresh(self, endpoint_id: str, request_id: str, now: float) -> None:
        await self.store.acquire(endpoint_id, request_id, ttl_s=self.ttl_s, now=now)
        if (endpoint_id, request_id) not in self._taking:  # dropped meanwhile: undo
            await self.store.release(endpoint_id, request_id, now=self.clock())
