"""Rate windows: totals over the last window, exact limits under concurrency."""

from __future__ import annotations

import asyncio

from gateway.state.store import StatsStore
from tests.contract.conftest import StoreClients

NOW = 1_000_020.0  # a slot boundary for a 60 s window (slots of 6 s)


async def test_hit_returns_the_window_total(store: StatsStore) -> None:
    assert await store.hit("k", cost=3, window_s=60, now=NOW) == 3
    assert await store.hit("k", cost=4, window_s=60, now=NOW + 30) == 7
    assert await store.hit("other", cost=1, window_s=60, now=NOW) == 1


async def test_old_hits_leave_the_window(store: StatsStore) -> None:
    await store.hit("k", cost=5, window_s=60, now=NOW)
    await store.hit("k", cost=2, window_s=60, now=NOW + 30)
    assert await store.hit("k", cost=1, window_s=60, now=NOW + 59) == 8
    assert await store.hit("k", cost=1, window_s=60, now=NOW + 61) == 4
    assert await store.hit("k", cost=1, window_s=60, now=NOW + 200) == 1


async def test_try_hit_adds_only_under_the_limit(store: StatsStore) -> None:
    assert await store.try_hit("k", cost=6, limit=10, window_s=60, now=NOW) == (True, 6)
    assert await store.try_hit("k", cost=5, limit=10, window_s=60, now=NOW) == (False, 6)
    assert await store.try_hit("k", cost=4, limit=10, window_s=60, now=NOW) == (True, 10)
    assert await store.try_hit("k", cost=1, limit=10, window_s=60, now=NOW + 61) == (True, 1)


async def test_hit_and_try_hit_share_one_window(store: StatsStore) -> None:
    await store.hit("k", cost=9, window_s=60, now=NOW)
    assert await store.try_hit("k", cost=2, limit=10, window_s=60, now=NOW) == (False, 9)


async def test_try_hit_admits_exactly_the_limit_under_concurrency(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica admits up to the limit on its own)."""
    clients = await stores.open(4)
    results = await asyncio.gather(
        *(
            clients[i % 4].try_hit("tenant:acme:rpm", cost=1, limit=5, window_s=60, now=NOW)
            for i in range(50)
        )
    )
    assert sum(added for added, _ in results) == 5
    assert max(total for _, total in results) == 5


async def test_concurrent_hits_from_four_clients_sum_exactly(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica sums only its own hits)."""
    clients = await stores.open(4)
    totals = await asyncio.gather(
        *(clients[i % 4].hit("tokens", cost=10, window_s=60, now=NOW) for i in range(40))
    )
    assert sorted(totals) == [10 * i for i in range(1, 41)]
