"""Settlement, spend, budgets and usage buckets (gateway/state/usage.py), on every store."""

from __future__ import annotations

import asyncio

from gateway.state.store import StatsStore, TenantCharge, TenantQuota
from gateway.state.usage import BudgetQuota, Settlement, UsageLine, hour_index
from tests.contract.conftest import StoreClients, landed

NOW = 1_000_020.0  # 1970-01-12 13:47 UTC: the day ends in 36 780 s
QUOTA = TenantQuota(requests=100, tokens=1000)


def line(cost: int = 500, *, model: str = "m", endpoint: str = "a", prompt: int = 10) -> UsageLine:
    return UsageLine("interactive", model, endpoint, prompt, 4, 7, cost)


def acme(
    request_id: str,
    tokens: int,
    now: float,
    quota: TenantQuota = QUOTA,
    budget: BudgetQuota | None = None,
) -> TenantCharge:
    return TenantCharge("acme", request_id, tokens, quota, ttl_s=60, now=now, budget=budget)


async def admit(
    store: StatsStore, tokens: int, now: float = NOW, budget: BudgetQuota | None = None
) -> str:
    return (await store.admit_tenant(acme(f"r{tokens}-{now}", tokens, now, budget=budget))).verdict


async def test_settlement_refunds_and_charges_the_reservations_slot(store: StatsStore) -> None:
    first = await store.admit_tenant(acme("a", 600, NOW))
    assert (first.verdict, first.tokens_used, first.requests_used) == ("admitted", 600, 1)
    assert await admit(store, 600) == "tokens"
    # It used 17 tokens: its 600 leave the reservation's slot, the 17 go to the current one.
    later = NOW + 20
    await store.settle(Settlement("acme", later, first.slot, 600, 17, 60.0, line()))
    await landed(store)
    again = await store.admit_tenant(acme("b", 900, later))
    assert (again.verdict, again.tokens_used) == ("admitted", 917)
    # Over-estimated the other way: it produced more than reserved, and the window says so.
    await store.settle(Settlement("acme", later, again.slot, 900, 980, 60.0, line()))
    await landed(store)
    third = await store.admit_tenant(acme("c", 4, later))
    assert (third.verdict, third.tokens_used) == ("tokens", 997)


async def test_a_slot_out_of_the_window_is_not_recreated(store: StatsStore) -> None:
    first = await store.admit_tenant(acme("a", 600, NOW))
    later = NOW + 120  # the reservation's slot has left the window
    await store.admit_tenant(acme("b", 5, later))
    await store.settle(Settlement("acme", later, first.slot, 600, 0, 60.0, line()))
    await landed(store)
    third = await store.admit_tenant(acme("c", 1, later))
    assert third.tokens_used == 6


async def test_tokens_used_after_the_reservation_left_count_in_the_current_window(
    store: StatsStore,
) -> None:
    """A stream longer than the window: what it uses is charged where it is used, so the
    window it runs in is spent and refuses new requests."""
    first = await store.admit_tenant(acme("a", 300, NOW))
    for second in (30, 60, 90):  # its tokens charged as it streams, the reservation given back
        refund = 300 if second == 30 else 0
        await store.settle(Settlement("acme", NOW + second, first.slot, refund, 400, 60.0, None))
    await landed(store)
    later = await store.admit_tenant(acme("b", 300, NOW + 91))
    assert (later.verdict, later.tokens_used) == ("tokens", 800)  # 60 and 90; 30 has left


async def test_admission_reports_what_the_windows_hold(store: StatsStore) -> None:
    quota = TenantQuota(requests=3, tokens=100)
    for i, verdict in enumerate(["admitted", "admitted", "admitted", "requests"]):
        got = await store.admit_tenant(acme(f"r{i}", 10, NOW, quota=quota))
        assert got.verdict == verdict
        assert got.requests_used == min(i + 1, 3)
        assert got.requests_oldest == got.tokens_oldest == got.slot


async def test_budget_refuses_once_spent_and_admits_next_day(store: StatsStore) -> None:
    budget = BudgetQuota(day_pusd=1000, month_pusd=10_000)
    assert await admit(store, 1, budget=budget) == "admitted"
    await store.settle(Settlement("acme", NOW, None, 0, 0, 60.0, line(cost=999), budget))
    await landed(store)
    assert await admit(store, 2, budget=budget) == "admitted"  # 999 < 1000
    await store.settle(Settlement("acme", NOW, None, 0, 0, 60.0, line(cost=1), budget))
    await landed(store)
    refused = await store.admit_tenant(acme("x", 1, NOW, budget=budget))
    assert (refused.verdict, refused.spend_day_pusd, refused.spend_month_pusd) == (
        "budget",
        1000,
        1000,
    )
    tomorrow = NOW + 36_780 + 1
    assert await admit(store, 3, tomorrow, budget=budget) == "admitted"
    month = BudgetQuota(month_pusd=1000)
    assert await admit(store, 4, tomorrow, budget=month) == "budget"  # same month


async def test_soft_alert_is_raised_once_per_window(stores: StoreClients) -> None:
    clients = await stores.open(2)
    budget = BudgetQuota(day_pusd=1000, soft_fraction=0.5)
    raised: list[str] = []
    for i in range(6):
        settlement = Settlement("acme", NOW, None, 0, 0, 60.0, line(cost=200), budget)
        await clients[i % 2].settle(settlement, raised.append)
    await landed(*clients)
    assert raised == ["day"]


async def test_usage_buckets_group_by_hour_and_group(stores: StoreClients) -> None:
    clients = await stores.open(3)
    settlements = [
        Settlement("acme", NOW, None, 0, 0, 60.0, line(model="m", endpoint=e, prompt=p))
        for e, p in (("a", 10), ("a", 20), ("b", 5))
    ] + [
        Settlement("zeta", NOW + 3600, None, 0, 0, 60.0, line(cost=1)),
        Settlement("acme", NOW, None, 0, 0, 60.0, None),  # nothing used: nothing accounted
    ]
    await asyncio.gather(*(clients[i % 3].settle(s) for i, s in enumerate(settlements)))
    await landed(*clients)
    hour = hour_index(NOW)
    rows = await clients[0].usage(["acme", "zeta"], since_hour=hour, until_hour=hour + 2)
    found = {(r.hour - hour, r.tenant, r.endpoint): r.metrics for r in rows}
    assert found == {
        (0, "acme", "a"): dict(
            requests=2, prompt_tokens=30, cached_tokens=8, completion_tokens=14, cost_pusd=1000
        ),
        (0, "acme", "b"): dict(
            requests=1, prompt_tokens=5, cached_tokens=4, completion_tokens=7, cost_pusd=500
        ),
        (1, "zeta", "a"): dict(
            requests=1, prompt_tokens=10, cached_tokens=4, completion_tokens=7, cost_pusd=1
        ),
    }
    assert await clients[0].usage(["acme"], since_hour=hour + 1, until_hour=hour + 2) == []
