"""In-flight leases: exact counts over all clients, expiry of a crashed client's leases."""

from __future__ import annotations

import asyncio

from gateway.state.store import StatsStore
from tests.contract.conftest import StoreClients

NOW = 1_000_000.0


async def in_flight(store: StatsStore, endpoint_id: str, now: float) -> int:
    return (await store.read([endpoint_id], now=now))[endpoint_id].in_flight


async def test_acquire_counts_live_leases_and_release_frees_them(store: StatsStore) -> None:
    assert await store.acquire("a", "r1", ttl_s=30, now=NOW) == 1
    assert await store.acquire("a", "r2", ttl_s=30, now=NOW) == 2
    assert await store.acquire("b", "r3", ttl_s=30, now=NOW) == 1
    await store.release("a", "r1", now=NOW)
    assert await in_flight(store, "a", NOW) == 1
    assert await in_flight(store, "b", NOW) == 1


async def test_read_in_flight_counts_live_leases_only(store: StatsStore) -> None:
    await store.acquire("a", "r1", ttl_s=5, now=NOW)
    await store.acquire("a", "r2", ttl_s=60, now=NOW)
    await store.acquire("b", "r3", ttl_s=60, now=NOW)
    assert await store.read_in_flight(["a", "b", "c"], now=NOW) == {"a": 2, "b": 1, "c": 0}
    assert await store.read_in_flight(["a", "b"], now=NOW + 5) == {"a": 1, "b": 1}


async def test_reacquiring_a_request_id_does_not_count_twice(store: StatsStore) -> None:
    await store.acquire("a", "r1", ttl_s=30, now=NOW)
    assert await store.acquire("a", "r1", ttl_s=30, now=NOW + 1) == 1


async def test_releasing_an_unknown_lease_is_harmless(store: StatsStore) -> None:
    await store.release("a", "never-taken", now=NOW)
    assert await in_flight(store, "a", NOW) == 0


async def test_expired_leases_are_not_counted(store: StatsStore) -> None:
    await store.acquire("a", "short", ttl_s=5, now=NOW)
    await store.acquire("a", "long", ttl_s=60, now=NOW)
    assert await in_flight(store, "a", NOW + 4.9) == 2
    assert await in_flight(store, "a", NOW + 5.0) == 1
    assert await store.acquire("a", "new", ttl_s=60, now=NOW + 10) == 2


async def test_a_renewed_lease_outlives_its_first_expiry(store: StatsStore) -> None:
    await store.acquire("a", "stream", ttl_s=5, now=NOW)
    await store.acquire("a", "other", ttl_s=5, now=NOW)
    await store.acquire("a", "stream", ttl_s=5, now=NOW + 4)
    assert await in_flight(store, "a", NOW + 6) == 1
    assert await in_flight(store, "a", NOW + 9) == 0


async def test_concurrent_acquires_from_four_clients_give_an_exact_count(
    stores: StoreClients,
) -> None:
    clients = stores.open(4)
    counts = await asyncio.gather(
        *(clients[i % 4].acquire("hot", f"r{i}", ttl_s=60, now=NOW) for i in range(200))
    )
    assert sorted(counts) == list(range(1, 201))
    assert await in_flight(clients[0], "hot", NOW) == 200


async def test_leases_of_a_crashed_client_expire(stores: StoreClients) -> None:
    crashed, survivor = stores.open(2)
    await asyncio.gather(*(crashed.acquire("a", f"c{i}", ttl_s=5, now=NOW) for i in range(50)))
    await crashed.close()  # gone without releasing anything
    await survivor.acquire("a", "s1", ttl_s=60, now=NOW + 1)
    assert await in_flight(survivor, "a", NOW + 1) == 51
    assert await in_flight(survivor, "a", NOW + 6) == 1
    assert await survivor.acquire("a", "s2", ttl_s=60, now=NOW + 6) == 2
