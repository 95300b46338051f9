"""The stored-response owner map: one contract for memory and Redis (one command per call,
the key from gateway/state/keys.py, a TTL on every key)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from gateway.state.keys import KeySpace
from gateway.state.owners import MemoryOwnerStore, OwnerStore, RedisOwnerStore


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def owners(request: pytest.FixtureRequest) -> AsyncIterator[OwnerStore]:
    if request.param == "memory":
        yield MemoryOwnerStore()
        return
    client = Redis.from_url(request.getfixturevalue("redis_url"))
    yield RedisOwnerStore(client, KeySpace(request.getfixturevalue("key_prefix")), timeout_s=1.0)
    await client.aclose()


async def test_an_owner_is_kept_until_its_ttl_or_its_deletion(owners: OwnerStore) -> None:
    now = time.time()
    await owners.put("resp_a", '{"endpoint_id":"e1"}', ttl_s=0.3, now=now)
    await owners.put("resp_b", '{"endpoint_id":"e2"}', ttl_s=60, now=now)
    assert await owners.get("resp_a", now=now) == '{"endpoint_id":"e1"}'
    await owners.delete("resp_b")
    assert await owners.get("resp_b", now=now) is None
    await asyncio.sleep(0.4)  # Redis expires by its own clock; memory by the `now` it is given
    assert await owners.get("resp_a", now=now + 0.4) is None


async def test_a_later_write_replaces_the_owner(owners: OwnerStore) -> None:
    now = time.time()
    await owners.put("resp_c", "first", ttl_s=60, now=now)
    await owners.put("resp_c", "second", ttl_s=60, now=now)
    assert await owners.get("resp_c", now=now) == "second"


@pytest.mark.redis
async def test_redis_keeps_one_key_per_response_with_a_ttl(
    redis_client: Redis, key_prefix: str
) -> None:
    keys = KeySpace(key_prefix)
    owners = RedisOwnerStore(redis_client, keys, timeout_s=1.0)
    await owners.put("resp_d", "v", ttl_s=30, now=time.time())
    key = keys.response_owner("resp_d")
    assert key == f"{key_prefix}{{resp:resp_d}}:owner"
    assert 29_000 < await redis_client.pttl(key) <= 30_000


async def test_memory_forgets_the_oldest_beyond_its_capacity() -> None:
    owners = MemoryOwnerStore(capacity=2)
    for name in ("a", "b", "c"):
        await owners.put(name, name, ttl_s=60, now=0.0)
    assert [await owners.get(name, now=1.0) for name in ("a", "b", "c")] == [None, "b", "c"]
