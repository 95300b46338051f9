"""One contract for the control records' stores (gateway/state/control.py): memory and Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from gateway.state.control import ControlStore, MemoryControlStore, RedisControlStore


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[list[ControlStore]]:
    """Two clients of one store (for Redis, two connections, as two replicas)."""
    if request.param == "memory":
        shared = MemoryControlStore()
        yield [shared, shared]
        return
    url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("key_prefix")
    clients = [Redis.from_url(url), Redis.from_url(url)]
    yield [RedisControlStore(client, prefix) for client in clients]
    for client in clients:
        await client.aclose()


async def test_a_change_bumps_the_version_every_client_reads(stores: list[ControlStore]) -> None:
    one, other = stores
    start = await other.version()
    assert await one.swap("keys", "k1", None, '{"a": 1}')
    assert await other.version() == start + 1
    records = await other.read()
    assert records.version == start + 1 and records.keys == {"k1": '{"a": 1}'}
    assert records.tenants == {}


async def test_a_swap_writes_only_over_what_the_caller_read(stores: list[ControlStore]) -> None:
    one, other = stores
    assert await one.swap("tenants", "t", None, "v1")
    assert not await other.swap("tenants", "t", None, "v2")  # exists already
    assert not await other.swap("tenants", "t", "stale", "v2")
    assert await other.swap("tenants", "t", "v1", "v2")
    version = await one.version()
    assert not await one.swap("tenants", "t", "v1", None)  # nothing written, no version
    assert await one.version() == version
    assert await one.swap("tenants", "t", "v2", None)
    assert (await other.read()).tenants == {}


async def test_of_concurrent_swaps_from_one_value_exactly_one_wins(
    stores: list[ControlStore],
) -> None:
    one, other = stores
    await one.swap("keys", "k", None, "0")
    writers = [(one, other)[i % 2].swap("keys", "k", "0", f"w{i}") for i in range(20)]
    assert sum(await asyncio.gather(*writers)) == 1


@pytest.mark.redis
async def test_every_control_key_carries_a_ttl(redis_url: str, key_prefix: str) -> None:
    client = Redis.from_url(redis_url)
    store = RedisControlStore(client, key_prefix)
    await store.swap("keys", "k", None, "v")
    await store.refresh()
    names = [store.keys.control(part) for part in ("keys", "version")]
    ttls = [await client.pttl(name) for name in names]
    assert all(ttl > 0 for ttl in ttls), ttls
    await client.aclose()
