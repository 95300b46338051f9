"""A StatsStore that keeps the gateway serving while Redis is down or slow.

Every call has a bounded timeout and a failed one is served from per-replica memory; an outage
that failing PINGs confirm switches this replica to memory (logged once, exposed in /readyz and
`slo_gateway_redis_up`), and a background watch switches back when Redis answers. Lease takes
and drops and observations go through a write-behind (gateway/state/writebehind.py), one pipeline
per few milliseconds. Lease releases that could not reach Redis are replayed on recovery, so
no lease lingers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from gateway.state.breaker import BreakerPolicy, BreakerState
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.redis_store import FAILURES, RedisStatsStore, Write
from gateway.state.store import (
    Alerted,
    EndpointStats,
    LatencySample,
    StatsStore,
    TenantAdmission,
    TenantCharge,
)
from gateway.state.usage import Settlement, UsageRow
from gateway.state.writebehind import WriteBehind
from gateway.telemetry.metrics import log
from policies.fair_share import Counters

T = TypeVar("T")
Release = Callable[[StatsStore], Awaitable[None]]
WATCH_INTERVAL_S = 1.0
CONFIRM_PINGS = 3  # failed pings in a row that mark Redis down (see ResilientStore._suspect)


class ResilientStore:
    """A StatsStore over a primary (Redis) that degrades to a local MemoryStatsStore."""

    def __init__(
        self,
        primary: StatsStore,
        fallback: MemoryStatsStore,
        ping: Callable[[], Awaitable[Any]],
        *,
        timeout_s: float,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.timeout_s = timeout_s
        self.up = True
        self._ping = ping
        self._unreleased: list[Release] = []  # replayed on Redis once it is back
        self._probe: asyncio.Task[None] | None = None  # confirming a suspected outage
        self.writes = (
            WriteBehind(primary, self._writes_failed, timeout_s=timeout_s)
            if isinstance(primary, RedisStatsStore)
            else None
        )

    async def _run(self, op: Callable[[StatsStore], Awaitable[T]], *, decides: bool = True) -> T:
        """Run on Redis while it is up, else locally. A call that fails is served locally at
        once (its latency stays bounded by the timeout); only a failed deciding call (reads,
        admission) is reason to check whether Redis is gone, and a background write that times
        out under load is no evidence of it."""
        if self.up:
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await op(self.primary)
            except FAILURES as exc:
                if decides:
                    self._suspect(exc)
        return await op(self.fallback)

    def _suspect(self, exc: BaseException) -> None:
        """A failed call alone does not switch the replica to local state: under load, a
        saturated event loop (or a busy core under Redis) makes a healthy Redis's answer land
        after the timeout, and switching on that threw shared state away several times a
        minute. One probe at a time confirms it: Redis is down only if `CONFIRM_PINGS` pings in
        a row fail too. A dead or hung Redis fails them all within a few timeouts; a loaded one
        answers at least one, and requests meanwhile were served locally, one call each."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._confirm(exc))

    async def _confirm(self, exc: BaseException) -> None:
        for attempt in range(CONFIRM_PINGS):
            if attempt:
                await asyncio.sleep(self.timeout_s)
            try:
                async with asyncio.timeout(self.timeout_s):
                    await self._ping()
                return  # Redis answered: the failure was the load's, not Redis's
            except FAILURES as failure:
                exc = failure
        self._mark_down(exc)

    def _mark_down(self, exc: BaseException) -> None:
        if self.up:
            log.warning("shared store unavailable, serving from local state: %r", exc)
        self.up = False

    async def watch(self, interval_s: float = WATCH_INTERVAL_S) -> None:
        """Owned by the app lifespan: ping while down, switch back and replay releases (also
        those a slow Redis missed while it was up)."""
        while True:
            await asyncio.sleep(interval_s)
            if not self.up or self._unreleased:
                await self._try_recover()

    async def _try_recover(self) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._ping()
                for release in self._unreleased:
                    await release(self.primary)
        except FAILURES:
            return
        self._unreleased.clear()
        self.up = True
        log.warning("shared store is back; shared state resumed")

    async def _release(self, release: Release) -> None:
        # Released on both sides: the lease may have been taken before or during an outage.
        await release(self.fallback)
        if self.up:
            try:
                async with asyncio.timeout(self.timeout_s):
                    await release(self.primary)
                return
            except FAILURES:
                pass  # replayed by the watch once Redis answers a ping
        self._unreleased.append(release)

    async def _writes_failed(self, batch: list[Write], exc: BaseException) -> None:
        """A write-behind batch that failed, served locally in its order (a take, then its
        drop); its drops are replayed on Redis once it answers, like any other release."""
        log.debug("shared store write batch failed: %r", exc)
        for write in batch:
            if write.kind == "release":
                await self.fallback.release(write.endpoint_id, write.request_id, now=time.time())
                self._unreleased.append(_replay_release(write))
            elif write.kind == "acquire":
                await self.fallback.acquire(
                    write.endpoint_id, write.request_id, ttl_s=write.ttl_s, now=write.now
                )
            elif write.settlement is not None:
                await self.fallback.settle(write.settlement, write.alerted)
            elif write.sample is not None:
                await self.fallback.observe(write.endpoint_id, write.sample)

    async def acquire(self, endpoint_id: str, request_id: str, *, ttl_s: float, now: float) -> int:
        """Through the write-behind while Redis is up: the count is then not known yet (0), and
        no caller reads it (leases are counted from the shared view)."""
        if self.up and self.writes is not None:
            self.writes.submit(Write("acquire", endpoint_id, request_id, ttl_s, now))
            return 0
        return await self._run(
            lambda s: s.acquire(endpoint_id, request_id, ttl_s=ttl_s, now=now), decides=False
        )

    async def release(self, endpoint_id: str, request_id: str, *, now: float) -> None:
        if self.up and self.writes is not None:
            await self.fallback.release(endpoint_id, request_id, now=time.time())
            self.writes.submit(Write("release", endpoint_id, request_id))
            return
        await self._release(lambda s: s.release(endpoint_id, request_id, now=time.time()))

    async def read(self, endpoint_ids: Sequence[str], *, now: float) -> Mapping[str, EndpointStats]:
        return await self._run(lambda s: s.read(endpoint_ids, now=now))

    async def read_in_flight(self, endpoint_ids: Sequence[str], *, now: float) -> dict[str, int]:
        return await self._run(lambda s: s.read_in_flight(endpoint_ids, now=now))

    async def observe(self, endpoint_id: str, sample: LatencySample) -> None:
        if self.up and self.writes is not None:
            self.writes.submit(Write("observe", endpoint_id, sample=sample))
            return
        await self._run(lambda s: s.observe(endpoint_id, sample), decides=False)

    async def hit(self, key: str, *, cost: int, window_s: float, now: float) -> int:
        return await self._run(lambda s: s.hit(key, cost=cost, window_s=window_s, now=now))

    async def try_hit(
        self, key: str, *, cost: int, limit: int, window_s: float, now: float
    ) -> tuple[bool, int]:
        return await self._run(
            lambda s: s.try_hit(key, cost=cost, limit=limit, window_s=window_s, now=now)
        )

    async def admit_tenant(self, charge: TenantCharge) -> TenantAdmission:
        return await self._run(lambda s: s.admit_tenant(charge))

    async def settle(self, settlement: Settlement, alerted: Alerted | None = None) -> None:
        """Through the write-behind while Redis is up (off the request path); a batch that
        fails settles in memory, as a call during an outage does."""
        if self.up and self.writes is not None:
            self.writes.submit(Write("settle", "", settlement=settlement, alerted=alerted))
            return
        await self._run(lambda s: s.settle(settlement, alerted), decides=False)

    async def usage(
        self, tenants: Sequence[str], *, since_hour: int, until_hour: int
    ) -> list[UsageRow]:
        return await self._run(
            lambda s: s.usage(tenants, since_hour=since_hour, until_hour=until_hour)
        )

    async def release_tenant(self, tenant: str, request_id: str, *, now: float) -> None:
        await self._release(lambda s: s.release_tenant(tenant, request_id, now=time.time()))

    async def record_result(
        self, endpoint_id: str, *, ok: bool, now: float, policy: BreakerPolicy
    ) -> BreakerState:
        return await self._run(
            lambda s: s.record_result(endpoint_id, ok=ok, now=now, policy=policy), decides=False
        )

    async def charge_fair_share(
        self, slo_class: str, charges: Mapping[str, float], *, now: float
    ) -> Counters:
        """Off the request path (a replica's batch, every second), so a failure is no
        evidence of an outage."""
        return await self._run(
            lambda s: s.charge_fair_share(slo_class, charges, now=now), decides=False
        )

    async def claim_trial(self, endpoint_id: str, *, now: float, policy: BreakerPolicy) -> bool:
        return await self._run(lambda s: s.claim_trial(endpoint_id, now=now, policy=policy))

    async def cool_down(self, endpoint_id: str, *, until_s: float, now: float) -> float:
        return await self._run(
            lambda s: s.cool_down(endpoint_id, until_s=until_s, now=now), decides=False
        )

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        if self.writes is not None:  # stops its flusher; a batch left while down goes to memory
            try:
                await self.writes.close()
            except FAILURES as exc:
                log.debug("final write batch failed: %r", exc)
        await self.primary.close()
        await self.fallback.close()


def writes_at_once(store: StatsStore) -> bool:
    """Whether the store's lease takes and drops and its observations finish without suspending
    (so they can run in the caller, see `background.run_now`): the memory store never suspends,
    and `ResilientStore` over Redis queues them for its write-behind, or while Redis is down
    writes them to memory. Breaker and cool-down writes still go to Redis directly."""
    if isinstance(store, ResilientStore):
        return store.writes is not None
    return isinstance(store, MemoryStatsStore)


def _replay_release(write: Write) -> Release:
    return lambda store: store.release(write.endpoint_id, write.request_id, now=time.time())
