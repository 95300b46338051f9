"""Single-replica StatsStore: the Redis contract kept in this process.

The same bucket sums (window.py), rate slots (rate.py) and breaker transitions (breaker.py) as
the Redis store, so both give the same answers; the contract suite runs against both. No method
awaits in the middle of an update, so each one is atomic on the event loop. Expired state is
dropped when its key is next touched, as a Redis TTL would drop it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gateway.state import keys, usage, window
from gateway.state.breaker import BreakerPolicy, BreakerState, after_result, after_trial_claim
from gateway.state.rate import slot_range
from gateway.state.store import (
    Alerted,
    EndpointStats,
    LatencySample,
    TenantAdmission,
    TenantCharge,
    TenantQuota,
    TenantVerdict,
)
from gateway.state.usage import BudgetQuota, Settlement, UsageRow
from policies.base import LatencyEstimate
from policies.fair_share import NO_COUNTERS, Counters, charged
from policies.step_change import FAST_BUCKET_S, FAST_BUCKETS

_Fields = dict[str, float]
_CLOSED = BreakerState()  # an endpoint with no breaker record yet (frozen: one serves all)


class MemoryStatsStore:
    def __init__(
        self,
        *,
        window_s: float = 60.0,
        bucket_s: float = 5.0,
        half_life_s: float | None = None,
        usage_retention_s: float = keys.USAGE_RETENTION_S,
    ) -> None:
        """`half_life_s` defaults to window_s / 4 (see window.py)."""
        self.usage_retention_s = usage_retention_s
        self._spend: dict[tuple[str, str, int], int] = {}  # (tenant, "d" | "m", index) -> pUSD
        self._alerts: set[tuple[str, str, int]] = set()
        # (tenant, hour) -> group -> amounts in usage.METRICS order: the Redis hash's fields,
        # kept as numbers (no field names to build per request)
        self._usage: dict[tuple[str, int], dict[usage.Group, list[int]]] = {}
        self._usage_hour = 0
        self.window_s = window_s
        self.bucket_s = bucket_s
        self.half_life_s = half_life_s or window_s / 4
        self._bucket_count = math.ceil(window_s / bucket_s)
        self._leases = _LeaseSets()
        self._tenant_leases = _LeaseSets()
        self._holds: dict[str, dict[str, tuple[int, float]]] = {}  # tenant -> id -> (pUSD, expiry)
        self._buckets: dict[str, dict[int, _Fields]] = {}
        self._fast: dict[str, dict[int, _Fields]] = {}  # the fast window's buckets
        self._rates: dict[str, dict[int, int]] = {}
        self._breakers: dict[str, BreakerState] = {}
        self._cooldowns: dict[str, float] = {}
        self._fair: dict[str, Counters] = {}  # class -> its fairness counters
        # endpoint -> (newest bucket and fast bucket it was computed at, estimate): weights change
        # only when a bucket ends, so an estimate holds until then or the next observation.
        self._estimates: dict[str, tuple[tuple[int, int], LatencyEstimate]] = {}
        # endpoint -> (newest bucket, plain and weighted sums of the buckets before it): only
        # the newest bucket fills, so a read merges one bucket, not the whole window.
        self._history: dict[str, tuple[int, _Fields, _Fields]] = {}

    async def acquire(self, endpoint_id: str, request_id: str, *, ttl_s: float, now: float) -> int:
        return self._leases.add(endpoint_id, request_id, now + ttl_s, now)

    async def release(self, endpoint_id: str, request_id: str, *, now: float) -> None:
        self._leases.remove(endpoint_id, request_id)

    async def read(self, endpoint_ids: Sequence[str], *, now: float) -> Mapping[str, EndpointStats]:
        buckets = (window.bucket_index(now, self.bucket_s), window.bucket_index(now, FAST_BUCKET_S))
        return {eid: self._stats(eid, now, buckets) for eid in endpoint_ids}

    async def read_in_flight(self, endpoint_ids: Sequence[str], *, now: float) -> dict[str, int]:
        return {eid: self._leases.count(eid, now) for eid in endpoint_ids}

    async def observe(self, endpoint_id: str, sample: LatencySample) -> None:
        self._estimates.pop(endpoint_id, None)
        index = window.bucket_index(sample.at_s, self.bucket_s)
        history = self._history.get(endpoint_id)
        if history is not None and index < history[0]:
            del self._history[endpoint_id]  # a late sample changes a merged bucket
        buckets = self._buckets.setdefault(endpoint_id, {})
        for old in [b for b in buckets if b <= index - self._bucket_count]:
            del buckets[old]
        increments = window.sample_fields(sample)
        _add(buckets.setdefault(index, {}), increments)
        fast_index = window.bucket_index(sample.at_s, FAST_BUCKET_S)
        fast = self._fast.setdefault(endpoint_id, {})
        for old in [b for b in fast if b <= fast_index - FAST_BUCKETS]:
            del fast[old]
        _add(fast.setdefault(fast_index, {}), window.fast_fields(increments))

    async def hit(self, key: str, *, cost: int, window_s: float, now: float) -> int:
        _, total = self._rate(key, cost, None, window_s, now)
        return total

    async def try_hit(
        self, key: str, *, cost: int, limit: int, window_s: float, now: float
    ) -> tuple[bool, int]:
        return self._rate(key, cost, limit, window_s, now)

    async def admit_tenant(self, charge: TenantCharge) -> TenantAdmission:
        tenant, request_id, tokens, quota, ttl_s, now, budget, hold = charge
        requests_key, tokens_key = f"tenant:{tenant}:requests", f"tenant:{tenant}:tokens"
        current, _ = slot_range(now, quota.window_s)
        requests = self._slots(requests_key, quota, now) if quota.requests is not None else {}
        charged = self._slots(tokens_key, quota, now) if quota.tokens is not None else {}
        day = self._spend.get((tenant, "d", usage.day_index(now)), 0)
        month = self._spend.get((tenant, "m", usage.month_index(now)), 0)

        def verdict(name: TenantVerdict) -> TenantAdmission:
            return TenantAdmission(
                name, current, sum(requests.values()), sum(charged.values()),
                _oldest(requests), _oldest(charged), day, month,
            )  # fmt: skip

        if quota.requests is not None and sum(requests.values()) + 1 > quota.requests:
            return verdict("requests")
        if quota.tokens is not None and sum(charged.values()) + tokens > quota.tokens:
            return verdict("tokens")
        if budget is not None and _over(budget, day, month, self._held(tenant, now), hold):
            return verdict("budget")
        if quota.concurrent is not None:
            key = f"tenant:{tenant}"
            if self._tenant_leases.count(key, now) >= quota.concurrent:
                return verdict("concurrency")
            self._tenant_leases.add(key, request_id, now + ttl_s, now)
        if hold > 0:
            self._holds.setdefault(tenant, {})[request_id] = (hold, now + ttl_s)
        if quota.requests is not None:
            self._rate(requests_key, 1, None, quota.window_s, now)
            requests[current] = requests.get(current, 0) + 1
        if quota.tokens is not None:
            self._rate(tokens_key, tokens, None, quota.window_s, now)
            charged[current] = charged.get(current, 0) + tokens
        return verdict("admitted")

    async def settle(self, settlement: Settlement, alerted: Alerted | None = None) -> None:
        tenant, at, slot = settlement.tenant, settlement.at_s, settlement.token_slot
        key = f"tenant:{tenant}:tokens"
        if slot is not None and slot in self._rates.get(key, {}):  # the reservation's slot
            self._rates[key][slot] -= settlement.token_refund
        if settlement.token_charge:
            self._rate(key, settlement.token_charge, None, settlement.window_s, at)
        if settlement.hold_id is not None:
            self._holds.get(tenant, {}).pop(settlement.hold_id, None)
        line = settlement.usage
        cost = line.cost_pusd if line else 0
        if cost or settlement.budget is not None:  # nothing to spend or watch otherwise
            self._spend_in(tenant, at, cost, settlement.budget or usage.NO_BUDGET, alerted)
        if line is not None:
            hour = usage.hour_index(at)
            usage.add_line(self._usage.setdefault((tenant, hour), {}), line)
            if hour != self._usage_hour:  # a new hour: the oldest may have left the retention
                self._usage_hour = hour
                self._expire_usage(hour)

    def _spend_in(
        self, tenant: str, at: float, cost: int, budget: BudgetQuota, alerted: Alerted | None
    ) -> None:
        windows = (
            ("d", usage.day_index(at), budget.day_pusd),
            ("m", usage.month_index(at), budget.month_pusd),
        )
        for window_name, index, limit in windows:
            key = (tenant, window_name, index)
            self._spend[key] = spent = self._spend.get(key, 0) + cost
            soft = budget.soft(limit)
            if soft is not None and spent >= soft and key not in self._alerts:
                self._alerts.add(key)
                if alerted is not None:
                    alerted("day" if window_name == "d" else "month")

    async def usage(
        self, tenants: Sequence[str], *, since_hour: int, until_hour: int
    ) -> list[UsageRow]:
        return [
            row
            for tenant in tenants
            for hour in range(since_hour, until_hour)
            for row in usage.group_rows(tenant, hour, self._usage.get((tenant, hour), {}))
        ]

    def _expire_usage(self, hour: int) -> None:
        """Hours past the retention go, as their Redis keys' TTLs would drop them."""
        oldest = hour - int(self.usage_retention_s // usage.HOUR_S)
        for key in [k for k in self._usage if k[1] < oldest]:
            del self._usage[key]

    async def release_tenant(self, tenant: str, request_id: str, *, now: float) -> None:
        self._tenant_leases.remove(f"tenant:{tenant}", request_id)

    def _held(self, tenant: str, now: float) -> int:
        """The tenant's live budget holds (pico-USD), expired ones dropped first."""
        holds = self._holds.get(tenant)
        if not holds:
            return 0
        for request_id in [r for r, (_, expiry) in holds.items() if expiry <= now]:
            del holds[request_id]
        return sum(amount for amount, _ in holds.values())

    def _slots(self, key: str, quota: TenantQuota, now: float) -> dict[int, int]:
        """The window's slots (older ones dropped first)."""
        self._rate(key, 0, None, quota.window_s, now)
        return dict(self._rates.get(key, {}))

    async def charge_fair_share(
        self, slo_class: str, charges: Mapping[str, float], *, now: float
    ) -> Counters:
        counters = charged(self._fair.get(slo_class, NO_COUNTERS), charges, now)
        self._fair[slo_class] = counters
        return counters

    async def record_result(
        self, endpoint_id: str, *, ok: bool, now: float, policy: BreakerPolicy
    ) -> BreakerState:
        state = self._breakers.get(endpoint_id, _CLOSED)
        state = after_result(state, ok=ok, now=now, policy=policy)
        self._breakers[endpoint_id] = state
        return state

    async def claim_trial(self, endpoint_id: str, *, now: float, policy: BreakerPolicy) -> bool:
        state = self._breakers.get(endpoint_id, _CLOSED)
        claimed = after_trial_claim(state, now=now, policy=policy)
        if claimed is None:
            return False
        self._breakers[endpoint_id] = claimed
        return True

    async def cool_down(self, endpoint_id: str, *, until_s: float, now: float) -> float:
        until_s = max(until_s, self._cooldowns.get(endpoint_id, 0.0))
        self._cooldowns[endpoint_id] = until_s
        return until_s

    async def close(self) -> None:
        return None

    def _rate(
        self, key: str, cost: int, limit: int | None, window_s: float, now: float
    ) -> tuple[bool, int]:
        current, oldest = slot_range(now, window_s)
        slots = self._rates.setdefault(key, {})
        for old in [s for s in slots if s < oldest]:
            del slots[old]
        total = sum(slots.values())
        if limit is not None and total + cost > limit:
            return False, total
        slots[current] = slots.get(current, 0) + cost
        return True, total + cost

    def _stats(self, endpoint_id: str, now: float, buckets: tuple[int, int]) -> EndpointStats:
        return EndpointStats(
            self._leases.count(endpoint_id, now),
            self._latency(endpoint_id, buckets),
            self._breakers.get(endpoint_id, _CLOSED),
            self._cooldowns.get(endpoint_id, 0.0),
        )

    def _latency(self, endpoint_id: str, buckets: tuple[int, int]) -> LatencyEstimate:
        """`buckets`: the newest bucket of the window and of the fast window."""
        cached = self._estimates.get(endpoint_id)
        if cached is not None and cached[0] == buckets:
            return cached[1]
        newest, fast_newest = buckets
        older_sums, older_weighted = self._older(endpoint_id, newest)
        sums, weighted = dict(older_sums), dict(older_weighted)
        for name, value in self._buckets.get(endpoint_id, {}).get(newest, {}).items():
            sums[name] = sums.get(name, 0.0) + value
            weighted[name] = weighted.get(name, 0.0) + value  # the newest bucket weighs 1
        estimate = window.estimate(sums, weighted, self._fast_sums(endpoint_id, fast_newest))
        self._estimates[endpoint_id] = (buckets, estimate)
        return estimate

    def _fast_sums(self, endpoint_id: str, newest: int) -> _Fields:
        sums: _Fields = {}
        for index, bucket in self._fast.get(endpoint_id, {}).items():
            if newest - FAST_BUCKETS < index <= newest:
                _add(sums, bucket)
        return sums

    def _older(self, endpoint_id: str, newest: int) -> tuple[_Fields, _Fields]:
        """Merged sums of the window's buckets before `newest`, computed once per bucket."""
        history = self._history.get(endpoint_id)
        if history is not None and history[0] == newest:
            return history[1], history[2]
        weights = {
            index: window.weight((newest - index) * self.bucket_s, self.half_life_s)
            for index in range(newest - self._bucket_count + 1, newest)
        }
        fields = (
            (weights[index], name, value)
            for index, bucket in self._buckets.get(endpoint_id, {}).items()
            if index in weights
            for name, value in bucket.items()
        )
        sums, weighted = window.merge(fields)
        self._history[endpoint_id] = (newest, sums, weighted)
        return sums, weighted


def _add(fields: _Fields, increments: Mapping[str, float]) -> None:
    for name, amount in increments.items():
        fields[name] = fields.get(name, 0.0) + amount


def _oldest(slots: Mapping[int, int]) -> int | None:
    return min((slot for slot, count in slots.items() if count > 0), default=None)


def _over(budget: BudgetQuota, day: int, month: int, held: int, hold: int) -> bool:
    """The spend and the live holds leave less than `hold` (or nothing) in a window."""
    return any(
        limit is not None and (spent + held >= limit or spent + held + hold > limit)
        for limit, spent in ((budget.day_pusd, day), (budget.month_pusd, month))
    )


class _LeaseSets:
    """Lease sets by key (request id -> expiry), expired leases dropped when a key is read.

    Each set keeps a lower bound on its expiries, so a read finds nothing due without scanning:
    the view reads every endpoint's set at every refresh, over every lease held.
    """

    def __init__(self) -> None:
        self._sets: dict[str, dict[str, float]] = {}
        self._due: dict[str, float] = {}  # key -> no lease of it expires before this

    def count(self, key: str, now: float) -> int:
        leases = self._sets.get(key)
        if leases is None:
            return 0
        if now >= self._due[key]:
            for request_id in [r for r, expiry in leases.items() if expiry <= now]:
                del leases[request_id]
            self._due[key] = min(leases.values(), default=math.inf)
        return len(leases)

    def add(self, key: str, request_id: str, expiry: float, now: float) -> int:
        """Take (or renew) a lease; the set's size after."""
        self.count(key, now)
        self._sets.setdefault(key, {})[request_id] = expiry
        self._due[key] = min(self._due.get(key, math.inf), expiry)
        return len(self._sets[key])

    def remove(self, key: str, request_id: str) -> None:
        self._sets.get(key, {}).pop(request_id, None)
