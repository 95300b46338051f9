"""The shared-state contract: in-flight leases, rolling latency statistics, rate windows.

Two implementations keep one contract (proven by one suite in tests/contract/):
`MemoryStatsStore` for a single replica, `RedisStatsStore` for many sharing one Redis.
Callers pass `now` (unix seconds, wall clock: replicas compare it) so tests can drive time.

    leases          acquire / release: in-flight count per endpoint over all replicas, with a TTL
                    so a crashed replica's leases expire
    estimates       observe a request (whole, or its first token and stretches while it
                    streams); read() returns rolling estimates and their fast window (window.py)
    rate windows    hit / try_hit: cost in the last window_s, exact across replicas
    tenants         admit_tenant: every limit of a tenant (and its budget) checked and counted
                    at once, or none; release_tenant gives the concurrency slot back
    usage           settle: a finished request's tokens reservation corrected to real usage,
                    its spend and usage buckets, in one write; usage() reads the buckets
    fair share      charge_fair_share: a class's fairness counters charged (a new or returning
                    key lifted to the least active one first) and read back, in one atomic call
    health          record_result / claim_trial: the shared circuit breaker (breaker.py);
                    cool_down: a provider's Retry-After, shared
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

from gateway.state.breaker import BreakerPolicy, BreakerState
from gateway.state.usage import BudgetQuota, Settlement, UsageRow
from policies.base import LatencyEstimate
from policies.fair_share import Counters

SampleKind = Literal["whole", "first_token", "progress", "rest"]


@dataclass(frozen=True, slots=True)
class LatencySample:
    """What one request on one endpoint showed: all of it at its end (`whole`), or in parts
    while it streams (gateway/core/progress.py): `first_token` (its TTFT; the request counts
    from then), `progress` (the TPOT of a stretch of a running stream) and `rest` (its end:
    the outcome, E2E and the TPOT of the tokens since the last stretch, if any). The parts of
    one request add up to what its `whole` sample would have added, stretch by stretch.
    Its TTFT is compared with the predicted one where it is observed (`whole`, `first_token`),
    its TPOT where the whole request's is (`whole`, `rest`)."""

    at_s: float  # when this was seen (unix s); picks its time bucket
    ok: bool
    status: int  # HTTP status, 0 for a connection error or timeout
    prompt_tokens: int
    output_tokens: int
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float
    in_flight: int = 0  # gateway-wide leases when the request started
    kind: SampleKind = "whole"
    # the policy's predicted means for this attempt (None: it predicted none), against which
    # the store learns how outcomes deviate (window.py, ratio histograms)
    ttft_predicted_s: float | None = None
    tpot_predicted_s: float | None = None


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """A tenant's limits (None: unlimited); the rate limits count over `window_s`."""

    requests: int | None = None
    tokens: int | None = None
    concurrent: int | None = None
    window_s: float = 60.0


class TenantCharge(NamedTuple):
    """One request against its tenant's limits and budget, checked and counted in one call."""

    tenant: str
    request_id: str
    tokens: int  # reserved: the prompt estimate + max_tokens (settled on real usage later)
    quota: TenantQuota
    ttl_s: float  # of its concurrency lease and its budget hold
    now: float
    budget: BudgetQuota | None = None
    # the predicted cost held against the budget until the request settles (keyed by
    # `request_id`, which must be the gateway's own: a repeated id would share one hold)
    hold_pusd: int = 0


TenantVerdict = Literal["admitted", "requests", "tokens", "concurrency", "budget"]
Alerted = Callable[[str], None]  # a budget's soft alert fired for a window ("day", "month")


@dataclass(frozen=True, slots=True)
class TenantAdmission:
    """The verdict and what the tenant's windows hold after it (the request counted when
    admitted), for its limit headers; `slot`: the tokens-window slot charged, for settlement.
    `*_oldest`: the oldest slot holding anything (None: empty), when capacity comes back."""

    verdict: TenantVerdict
    slot: int = 0
    requests_used: int = 0
    tokens_used: int = 0
    requests_oldest: int | None = None
    tokens_oldest: int | None = None
    spend_day_pusd: int = 0
    spend_month_pusd: int = 0


@dataclass(frozen=True, slots=True)
class EndpointStats:
    in_flight: int = 0
    latency: LatencyEstimate = field(default_factory=LatencyEstimate)
    breaker: BreakerState = field(default_factory=BreakerState)
    cooldown_until_s: float = 0.0  # a provider asked us to wait (Retry-After) until then

    def available(self, now: float) -> bool:
        """In rotation: not cooling down and the breaker closed (half-open waits for a trial)."""
        return self.cooldown_until_s <= now and self.breaker.phase(now) == "closed"


class StatsStore(Protocol):
    async def acquire(self, endpoint_id: str, request_id: str, *, ttl_s: float, now: float) -> int:
        """Take a lease; returns the endpoint's in-flight count over all replicas."""
        ...

    async def release(self, endpoint_id: str, request_id: str, *, now: float) -> None: ...

    async def read(self, endpoint_ids: Sequence[str], *, now: float) -> Mapping[str, EndpointStats]:
        """Every endpoint's stats in one round trip."""
        ...

    async def read_in_flight(self, endpoint_ids: Sequence[str], *, now: float) -> dict[str, int]:
        """Only the live lease counts, in one round trip: far cheaper than read()."""
        ...

    async def observe(self, endpoint_id: str, sample: LatencySample) -> None: ...

    async def hit(self, key: str, *, cost: int, window_s: float, now: float) -> int:
        """Add `cost` to a sliding rate window; returns the window's total after the add."""
        ...

    async def try_hit(
        self, key: str, *, cost: int, limit: int, window_s: float, now: float
    ) -> tuple[bool, int]:
        """Add `cost` only if the window's total stays <= limit: (added, total afterwards)."""
        ...

    async def admit_tenant(self, charge: TenantCharge) -> TenantAdmission:
        """Check every limit (a budget: the spend so far under it); count the request against
        all of them only if all pass."""
        ...

    async def release_tenant(self, tenant: str, request_id: str, *, now: float) -> None: ...

    async def settle(self, settlement: Settlement, alerted: Alerted | None = None) -> None:
        """Apply a finished request at once: token delta, spend, usage; `alerted` hears of a
        soft budget alert that this settlement raised (once per tenant and window)."""
        ...

    async def usage(
        self, tenants: Sequence[str], *, since_hour: int, until_hour: int
    ) -> list[UsageRow]:
        """The usage buckets of hours since_hour <= h < until_hour, one row per group."""
        ...

    async def charge_fair_share(
        self, slo_class: str, charges: Mapping[str, float], *, now: float
    ) -> Counters:
        """Add weighted served tokens to the class's fairness counters by key, as
        `policies.fair_share.charged` does, and return every counter of the class afterwards
        (no charges: only read them)."""
        ...

    async def record_result(
        self, endpoint_id: str, *, ok: bool, now: float, policy: BreakerPolicy
    ) -> BreakerState:
        """Apply one request or probe outcome to the shared breaker; returns the new state."""
        ...

    async def claim_trial(self, endpoint_id: str, *, now: float, policy: BreakerPolicy) -> bool:
        """True for exactly one caller per trial while the breaker is half-open."""
        ...

    async def cool_down(self, endpoint_id: str, *, until_s: float, now: float) -> float:
        """Keep the endpoint out of rotation until `until_s` (never shortens); returns the end."""
        ...

    async def close(self) -> None: ...
