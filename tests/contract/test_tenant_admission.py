"""Tenant admission: all of a tenant's limits checked and counted at once, exact under
concurrency, on every store."""

from __future__ import annotations

import asyncio

from gateway.state.store import StatsStore, TenantCharge, TenantQuota
from tests.contract.conftest import StoreClients

NOW = 1_000_020.0


async def admit(store: StatsStore, request_id: str, quota: TenantQuota, tokens: int = 10) -> str:
    admission = await store.admit_tenant(
        TenantCharge("acme", request_id, tokens=tokens, quota=quota, ttl_s=60, now=NOW)
    )
    return admission.verdict


async def test_requests_limit_counts_only_admitted_requests(store: StatsStore) -> None:
    quota = TenantQuota(requests=2)
    assert [await admit(store, f"r{i}", quota) for i in range(4)] == [
        "admitted",
        "admitted",
        "requests",
        "requests",
    ]
    later = await store.admit_tenant(
        TenantCharge("acme", "r9", tokens=1, quota=quota, ttl_s=60, now=NOW + 61)
    )
    assert later.verdict == "admitted"


async def test_a_refusal_by_one_limit_consumes_none_of_the_others(store: StatsStore) -> None:
    quota = TenantQuota(requests=3, tokens=1000, concurrent=1)
    assert await admit(store, "a", quota) == "admitted"
    assert await admit(store, "b", quota) == "concurrency"
    assert await admit(store, "c", quota) == "concurrency"
    await store.release_tenant("acme", "a", now=NOW)
    assert await admit(store, "d", quota) == "admitted"  # b and c used no request budget
    await store.release_tenant("acme", "d", now=NOW)
    assert await admit(store, "e", quota) == "admitted"
    await store.release_tenant("acme", "e", now=NOW)
    assert await admit(store, "f", quota) == "requests"


async def test_tokens_limit_includes_the_requests_own_cost(store: StatsStore) -> None:
    quota = TenantQuota(tokens=100)
    assert await admit(store, "a", quota, tokens=60) == "admitted"
    assert await admit(store, "b", quota, tokens=60) == "tokens"
    assert await admit(store, "c", quota, tokens=40) == "admitted"


async def test_tenants_do_not_share_limits(store: StatsStore) -> None:
    quota = TenantQuota(requests=1)
    assert await admit(store, "a", quota) == "admitted"
    other = await store.admit_tenant(
        TenantCharge("zeta", "a", tokens=1, quota=quota, ttl_s=60, now=NOW)
    )
    assert other.verdict == "admitted"


async def test_concurrent_admissions_admit_exactly_the_limit(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica admits up to the limit on its own)."""
    clients = await stores.open(4)
    quota = TenantQuota(requests=1000, concurrent=5)
    verdicts = await asyncio.gather(*(admit(clients[i % 4], f"r{i}", quota) for i in range(50)))
    assert verdicts.count("admitted") == 5
    assert set(verdicts) == {"admitted", "concurrency"}
