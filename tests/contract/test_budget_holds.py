"""Budget holds: a request's predicted cost is held against its tenant's budget from admission
until it settles, so concurrent requests cannot together spend past the budget; exact under
concurrency, across clients, and a crashed replica's holds expire. On every store."""

from __future__ import annotations

import asyncio

from gateway.state.store import StatsStore, TenantCharge, TenantQuota
from gateway.state.usage import BudgetQuota, Settlement, UsageLine
from tests.contract.conftest import StoreClients, landed

NOW = 1_000_020.0  # 36 780 s before the UTC day ends
BUDGET = BudgetQuota(day_pusd=300)


def charge(request_id: str, hold: int, now: float = NOW) -> TenantCharge:
    return TenantCharge("acme", request_id, 1, TenantQuota(), 60, now, BUDGET, hold)


def settled(request_id: str, hold: int, cost: int) -> Settlement:
    line = UsageLine("interactive", "m", "a", 10, 0, 5, cost)
    return Settlement("acme", NOW, None, 0, 0, 60.0, line, BUDGET, request_id, hold)


async def test_concurrent_holds_admit_exactly_what_the_budget_covers(
    stores: StoreClients,
) -> None:
    clients = await stores.open(3)
    verdicts = await asyncio.gather(
        *(clients[i % 3].admit_tenant(charge(f"r{i}", 50)) for i in range(30))
    )
    assert sorted(v.verdict for v in verdicts).count("admitted") == 6


async def test_settling_replaces_the_hold_with_the_real_cost(store: StatsStore) -> None:
    assert [(await store.admit_tenant(charge(f"r{i}", 100))).verdict for i in range(4)] == [
        "admitted",
        "admitted",
        "admitted",
        "budget",
    ]
    await store.settle(settled("r0", 100, 20))  # dearer predicted than it was
    await landed(store)
    assert (await store.admit_tenant(charge("r4", 80))).verdict == "admitted"  # 20 + 200 + 80
    assert (await store.admit_tenant(charge("r5", 1))).verdict == "budget"
    for request_id, hold in (("r1", 100), ("r2", 100), ("r4", 80)):
        await store.settle(settled(request_id, hold, 100))
    await landed(store)
    spent = await store.admit_tenant(charge("r6", 1))  # 320 spent: over, nothing held
    assert (spent.verdict, spent.spend_day_pusd) == ("budget", 320)


async def test_a_hold_larger_than_what_is_left_is_refused(store: StatsStore) -> None:
    assert (await store.admit_tenant(charge("a", 250))).verdict == "admitted"
    assert (await store.admit_tenant(charge("b", 60))).verdict == "budget"
    assert (await store.admit_tenant(charge("c", 50))).verdict == "admitted"


async def test_a_settlement_releases_its_own_hold_only_once(store: StatsStore) -> None:
    await store.admit_tenant(charge("a", 150))
    await store.admit_tenant(charge("b", 150))
    for _ in range(2):  # settled twice (a retried write): the second finds no hold
        await store.settle(settled("a", 150, 0))
    await landed(store)
    assert (await store.admit_tenant(charge("c", 151))).verdict == "budget"  # b still holds
    assert (await store.admit_tenant(charge("d", 150))).verdict == "admitted"


async def test_a_crashed_replicas_holds_expire(store: StatsStore) -> None:
    """Its requests never settle: their holds lapse with their lease TTL."""
    for i in range(3):
        await store.admit_tenant(charge(f"r{i}", 100))
    assert (await store.admit_tenant(charge("early", 100, NOW + 59))).verdict == "budget"
    after = await store.admit_tenant(charge("late", 300, NOW + 60))
    assert after.verdict == "admitted"
