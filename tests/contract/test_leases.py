"""In-flight leases: exact counts over all clients, expiry of a crashed client's leases."""

from __future__ import annotations

import asyncio

import pytest

from gateway.state.store import StatsStore
from tests.contract.conftest import StoreClients, landed

NOW = 1_000_000.0


async def in_flight(store: StatsStore, endpoint_id: str, now: float) -> int:
    await landed(store)
    return (await store.read([endpoint_id], now=now))[endpoint_id].in_flight


async def test_acquire_returns_the_live_count_exactly_under_concurrency(
    stores: StoreClients,
) -> None:
    """Not on a ResilientStore: its lease takes go through the write-behind and return before
    Redis counted them (0); no caller reads the count (the shared view counts leases)."""
    if stores.writes_behind:
        pytest.skip("a lease taken through the write-behind is counted after acquire returns")
    clients = await stores.open(4)
    assert await clients[0].acquire("a", "r0", ttl_s=30, now=NOW) == 1
    counts = await asyncio.gather(
        *(clients[i % 4].acquire("hot", f"r{i}", ttl_s=60, now=NOW) for i in range(200))
    )
    assert sorted(counts) == list(range(1, 201))


async def test_acquire_counts_live_leases_and_release_frees_them(store: StatsStore) -> None:
    await store.acquire("a", "r1", ttl_s=30, now=NOW)
    await store.acquire("a", "r2", ttl_s=30, now=NOW)
    await store.acquire("b", "r3", ttl_s=30, now=NOW)
    assert await in_flight(store, "a", NOW) == 2
    await store.release("a", "r1", now=NOW)
    assert await in_flight(store, "a", NOW) == 1
    assert await in_flight(store, "b", NOW) == 1


async def test_read_in_flight_counts_live_leases_only(store: StatsStore) -> None:
    await store.acquire("a", "r1", ttl_s=5, now=NOW)
    await store.acquire("a", "r2", ttl_s=60, now=NOW)
    await store.acquire("b", "r3", ttl_s=60, now=NOW)
    await landed(store)
    assert await store.read_in_flight(["a", "b", "c"], now=NOW) == {"a": 2, "b": 1, "c": 0}
    assert await store.read_in_flight(["a", "b"], now=NOW + 5) == {"a": 1, "b": 1}


async def test_reacquiring_a_request_id_does_not_count_twice(store: StatsStore) -> None:
    await store.acquire("a", "r1", ttl_s=30, now=NOW)
    await store.acquire("a", "r1", ttl_s=30, now=NOW + 1)
    assert await in_flight(store, "a", NOW + 1) == 1


async def test_releasing_an_unknown_lease_is_harmless(store: StatsStore) -> None:
    await store.release("a", "never-taken", now=NOW)
    assert await in_flight(store, "a", NOW) == 0


async def test_a_release_right_after_its_acquire_leaves_no_lease(store: StatsStore) -> None:
    """The write-behind sends a drop after its take, never before it."""
    for i in range(20):
        await store.acquire("a", f"r{i}", ttl_s=30, now=NOW)
        await store.release("a", f"r{i}", now=NOW)
    await store.acquire("a", "kept", ttl_s=30, now=NOW)
    assert await in_flight(store, "a", NOW) == 1


async def test_expired_leases_are_not_counted(store: StatsStore) -> None:
    await store.acquire("a", "short", ttl_s=5, now=NOW)
    await store.acquire("a", "long", ttl_s=60, now=NOW)
    assert await in_flight(store, "a", NOW + 4.9) == 2
    assert await in_flight(store, "a", NOW + 5.0) == 1
    await store.acquire("a", "new", ttl_s=60, now=NOW + 10)
    assert await in_flight(store, "a", NOW + 10) == 2


async def test_a_renewed_lease_outlives_its_first_expiry(store: StatsStore) -> None:
    await store.acquire("a", "stream", ttl_s=5, now=NOW)
    await store.acquire("a", "other", ttl_s=5, now=NOW)
    await store.acquire("a", "stream", ttl_s=5, now=NOW + 4)
    assert await in_flight(store, "a", NOW + 6) == 1
    assert await in_flight(store, "a", NOW + 9) == 0


async def test_concurrent_acquires_from_four_clients_give_an_exact_count(
    stores: StoreClients,
) -> None:
    """Across clients: skipped with Redis down (each replica counts only its own leases)."""
    clients = await stores.open(4)
    await asyncio.gather(
        *(clients[i % 4].acquire("hot", f"r{i}", ttl_s=60, now=NOW) for i in range(200))
    )
    await landed(*clients)
    assert await in_flight(clients[0], "hot", NOW) == 200


async def test_leases_of_a_crashed_client_expire(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica counts only its own leases)."""
    crashed, survivor = await stores.open(2)
    await asyncio.gather(*(crashed.acquire("a", f"c{i}", ttl_s=5, now=NOW) for i in range(50)))
    await landed(crashed)
    await crashed.close()  # gone without releasing anything
    await survivor.acquire("a", "s1", ttl_s=60, now=NOW + 1)
    assert await in_flight(survivor, "a", NOW + 1) == 51
    assert await in_flight(survivor, "a", NOW + 6) == 1
    await survivor.acquire("a", "s2", ttl_s=60, now=NOW + 6)
    assert await in_flight(survivor, "a", NOW + 6) == 2
