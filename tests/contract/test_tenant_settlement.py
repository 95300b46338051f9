"""`AdmissionControl`'s tenant accounting over every store, on an injected clock: budgets
refuse once spent and admit again when their UTC day or month resets; token reservations
settle on real usage."""

from __future__ import annotations

import random
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

from gateway.config.settings import TenantBudget, TenantLimits
from gateway.core.accounting import UsageBatch
from gateway.core.admission_control import ADMITTED, AdmissionControl
from gateway.state.store import StatsStore, TenantCharge, TenantQuota
from gateway.state.usage import BudgetQuota, UsageLine, UsageRow, hour_index
from policies.admission import AdmissionParams, Reason
from policies.base import RouteRequest, SloTarget
from tests.contract.conftest import landed

BATCH = SloTarget("batch", deadline_s=60.0)
MAY_30 = datetime(2025, 5, 30, 22, 0, tzinfo=UTC).timestamp()  # 2 h before the day ends


class Writes:
    """The settlements `AdmissionControl` hands off, awaited when the test says."""

    def __init__(self) -> None:
        self.pending: list[Coroutine[Any, Any, Any]] = []

    def __call__(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self.pending.append(coroutine)

    async def done(self, store: StatsStore) -> None:
        for coroutine in self.pending:
            await coroutine
        self.pending.clear()
        await landed(store)


def control(
    store: StatsStore, writes: Writes, budget: TenantBudget | None, **limits: int
) -> AdmissionControl[Any]:
    return AdmissionControl(
        AdmissionParams(),
        {"acme": TenantLimits(**limits)},
        store,
        writes,
        lease_ttl_s=60,
        budgets={"acme": budget},
    )


def route(n: int, max_tokens: int | None = None) -> RouteRequest:
    return RouteRequest(f"r{n}", "m", "acme", BATCH, 100, max_tokens)


def used(cost_pusd: int, completion: int = 10) -> UsageLine:
    return UsageLine("batch", "m", "e", 100, 0, completion, cost_pusd)


async def test_budget_refuses_until_the_utc_day_resets(store: StatsStore) -> None:
    writes, alerts = Writes(), list[str]()
    budget = TenantBudget(usd_per_day=1.0, usd_per_month=3.0, soft_alert_fraction=0.5)
    admission = control(store, writes, budget)
    now = MAY_30
    ticket = await admission.tenant_ticket(route(1), now)
    assert ticket.reject is None
    admission.settle(route(1), ticket, used(600_000_000_000), now, alerts.append)  # $0.60
    await writes.done(store)
    assert alerts == ["day"]  # crossed half of the day's dollar, once
    ticket = await admission.tenant_ticket(route(2), now)
    admission.settle(route(2), ticket, used(400_000_000_000), now + 1, alerts.append)
    await writes.done(store)
    refused = (await admission.tenant_ticket(route(3), now + 60)).reject
    assert refused is not None
    assert (refused.status, refused.reason) == (429, Reason.TENANT_BUDGET_EXCEEDED)
    assert refused.retry_after_s == 7200 - 60  # until midnight UTC
    assert alerts == ["day"]  # not again within the day
    tomorrow = now + 7200
    assert (await admission.tenant_ticket(route(4), tomorrow)).reject is None


async def test_a_spent_month_waits_for_the_next_month(store: StatsStore) -> None:
    writes = Writes()
    admission = control(store, writes, TenantBudget(usd_per_month=1.0))
    now = MAY_30
    ticket = await admission.tenant_ticket(route(1), now)
    admission.settle(route(1), ticket, used(10**12), now)
    await writes.done(store)
    next_day = now + 7200
    refused = (await admission.tenant_ticket(route(2), next_day)).reject
    assert refused is not None and refused.retry_after_s == 86400  # June 1st, 00:00 UTC
    assert (await admission.tenant_ticket(route(3), next_day + 86400)).reject is None


async def test_reservations_settle_on_real_usage(store: StatsStore) -> None:
    """Limit 1000: a request reserving prompt + max_tokens (100 + 800) that used 110 leaves
    room for the next one; without settlement it would have been refused."""
    writes = Writes()
    admission = control(store, writes, None, tokens_per_min=1000)
    now = MAY_30
    first = await admission.tenant_ticket(route(1, max_tokens=800), now)
    assert first.reject is None and first.reserved == 900
    second = await admission.tenant_ticket(route(2, max_tokens=800), now)
    assert second.reject is not None and second.reject.reason == Reason.TENANT_TOKEN_LIMITED
    admission.settle(route(1), first, used(0, completion=10), now + 30)
    await writes.done(store)
    third = await admission.tenant_ticket(route(3, max_tokens=790), now + 30)
    assert third.reject is None
    assert dict(third.headers)[b"x-ratelimit-remaining-tokens"] == b"0"  # 1000 - 110 - 890
    # A request that never reached an upstream gives its whole reservation back.
    admission.settle(route(3), third, None, now + 31)
    await writes.done(store)
    fourth = await admission.tenant_ticket(route(4, max_tokens=5000), now + 31)
    assert dict(fourth.headers)[b"x-ratelimit-remaining-tokens"] == b"890"
    assert fourth.reject is not None  # capped at the limit (1000), it still does not fit 890
    fifth = await admission.tenant_ticket(route(5, max_tokens=5000), now + 120)
    assert fifth.reject is None and fifth.reserved == 1000  # into an empty window


def unlimited(store: StatsStore, batch: UsageBatch | None) -> tuple[AdmissionControl[Any], Writes]:
    """Admission for tenants with neither a tokens limit nor a budget."""
    writes = Writes()
    control = AdmissionControl(AdmissionParams(), {}, store, writes, 60, None, writes, batch)
    return control, writes


async def spent(store: StatsStore, tenant: str, now: float) -> tuple[int, int]:
    """The tenant's spend this UTC day and month, as an admission under a budget reads it."""
    budget = BudgetQuota(day_pusd=10**18)
    charge = TenantCharge(tenant, f"probe-{now}", 0, TenantQuota(), 60, now, budget)
    admission = await store.admit_tenant(charge)
    return admission.spend_day_pusd, admission.spend_month_pusd


def by_group(rows: list[UsageRow]) -> dict[tuple[int, str, str, str], dict[str, int]]:
    return {(r.hour, r.slo_class, r.model, r.endpoint): r.metrics for r in rows}


async def test_batched_usage_settles_what_settling_each_request_would(store: StatsStore) -> None:
    """Requests of tenants without a tokens limit or a budget, over two UTC hours, settled one
    by one for "each" and through a `UsageBatch` for "batched": the usage buckets and the spend
    come out the same, and nothing of the batch is in the store until it is flushed."""
    rng = random.Random(4)
    each, each_writes = unlimited(store, None)
    batched, batch_writes = unlimited(store, UsageBatch())
    start = MAY_30 + 3000  # the next hour begins 600 s in
    for n in range(300):
        at = start + n * 4 + rng.random()
        line = UsageLine(
            rng.choice(["batch", "chat"]), "m", rng.choice(["e1", "e2", "e3"]),
            rng.randint(1, 9000), rng.randint(0, 500), rng.randint(0, 700), rng.randint(0, 10**9),
        )  # fmt: skip
        for control, tenant in ((each, "each"), (batched, "batched")):
            request = RouteRequest(f"r{n}", "m", tenant, BATCH, 100)
            control.settle(request, ADMITTED, line, at)
            control.settle(request._replace(request_id=f"gone{n}"), ADMITTED, None, at)
    await each_writes.done(store)
    await batch_writes.done(store)
    hours = {"since_hour": hour_index(start), "until_hour": hour_index(start) + 2}
    assert await store.usage(["batched"], **hours) == []
    batched.flush_usage()
    await batch_writes.done(store)
    settled_each = by_group(await store.usage(["each"], **hours))
    assert len({hour for hour, *_ in settled_each}) == 2
    assert by_group(await store.usage(["batched"], **hours)) == settled_each
    assert sum(m["requests"] for m in settled_each.values()) == 300
    day = await spent(store, "each", start + 1300)
    assert day[0] > 0
    assert await spent(store, "batched", start + 1300) == day
