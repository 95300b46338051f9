"""The stored-response owner map: one contract for memory and Redis (one call each, the keys
from gateway/state/keys.py, a TTL on every key): owners per tenant, create-only and
update-only writes, a cap per tenant with the oldest evicted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from gateway.state.keys import KeySpace
from gateway.state.owners import MemoryOwnerStore, OwnerStore, RedisOwnerStore
from gateway.state.redis_store import RedisStatsStore

CAP = 3


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def owners(request: pytest.FixtureRequest) -> AsyncIterator[OwnerStore]:
    if request.param == "memory":
        yield MemoryOwnerStore(cap=CAP)
        return
    client = Redis.from_url(request.getfixturevalue("redis_url"))
    stats = RedisStatsStore(client, prefix=request.getfixturevalue("key_prefix"))
    yield RedisOwnerStore(stats, timeout_s=1.0, cap=CAP)
    await client.aclose()


async def create(owners: OwnerStore, tenant: str, rid: str, value: str, **at: float) -> bool:
    ttl_s, now = at.get("ttl_s", 60.0), at.get("now", time.time())
    return await owners.put(tenant, rid, value, ttl_s=ttl_s, now=now, create=True)


async def test_an_owner_is_kept_until_its_ttl_or_its_deletion(owners: OwnerStore) -> None:
    now = time.time()
    await create(owners, "acme", "resp_a", '{"endpoint_id":"e1"}', ttl_s=0.3, now=now)
    await create(owners, "acme", "resp_b", '{"endpoint_id":"e2"}', now=now)
    assert await owners.get("acme", "resp_a", now=now) == '{"endpoint_id":"e1"}'
    await owners.delete("acme", "resp_b")
    assert await owners.get("acme", "resp_b", now=now) is None
    await asyncio.sleep(0.4)
    assert await owners.get("acme", "resp_a", now=now + 0.4) is None


async def test_an_owner_is_created_once_and_never_replaced(owners: OwnerStore) -> None:
    now = time.time()
    assert await create(owners, "acme", "resp_c", "first", now=now)
    assert not await create(owners, "acme", "resp_c", "second", now=now)
    assert await owners.get("acme", "resp_c", now=now) == "first"


async def test_an_update_changes_only_a_live_owner(owners: OwnerStore) -> None:
    now = time.time()
    update = {"ttl_s": 60.0, "now": now, "create": False}
    assert not await owners.put("acme", "resp_u", "tokens", **update)  # type: ignore[arg-type]
    assert await owners.get("acme", "resp_u", now=now) is None
    await create(owners, "acme", "resp_u", "created", ttl_s=0.5, now=now)
    assert await owners.put("acme", "resp_u", "tokens", **update)  # type: ignore[arg-type]
    assert await owners.get("acme", "resp_u", now=now) == "tokens"
    later = now + 0.6  # the update kept the creation's expiry
    assert await owners.get("acme", "resp_u", now=later) is None


async def test_one_id_names_a_response_only_within_its_tenant(owners: OwnerStore) -> None:
    now = time.time()
    assert await create(owners, "acme", "resp_x", "acme's", now=now)
    assert await owners.get("zeta", "resp_x", now=now) is None
    assert await create(owners, "zeta", "resp_x", "zeta's", now=now)
    await owners.delete("zeta", "resp_x")
    assert await owners.get("acme", "resp_x", now=now) == "acme's"


async def test_a_tenant_keeps_its_newest_owners_up_to_the_cap(owners: OwnerStore) -> None:
    now = time.time()
    for i in range(CAP + 2):
        await create(owners, "acme", f"resp_{i}", str(i), now=now + i * 0.001)
    await create(owners, "zeta", "resp_0", "other tenant", now=now)
    kept = [await owners.get("acme", f"resp_{i}", now=now + 1) for i in range(CAP + 2)]
    assert kept == [None, None, "2", "3", "4"]
    assert await owners.get("zeta", "resp_0", now=now + 1) == "other tenant"


async def test_an_expired_id_may_be_created_again(owners: OwnerStore) -> None:
    now = time.time()
    await create(owners, "acme", "resp_e", "old", ttl_s=0.2, now=now)
    await asyncio.sleep(0.3)
    assert await create(owners, "acme", "resp_e", "new", now=now + 0.3)
    assert await owners.get("acme", "resp_e", now=now + 0.3) == "new"


async def test_concurrent_creates_of_one_id_leave_exactly_one_owner(owners: OwnerStore) -> None:
    now = time.time()
    writes = [create(owners, "acme", "resp_race", f"writer {i}", now=now) for i in range(50)]
    won = [i for i, created in enumerate(await asyncio.gather(*writes)) if created]
    assert len(won) == 1
    assert await owners.get("acme", "resp_race", now=now) == f"writer {won[0]}"


@pytest.mark.redis
async def test_redis_keeps_a_map_and_an_order_per_tenant_with_a_ttl(
    redis_client: Redis, key_prefix: str
) -> None:
    stats = RedisStatsStore(redis_client, prefix=key_prefix)
    owners = RedisOwnerStore(stats, timeout_s=1.0)
    await create(owners, "acme", "resp_d", "v", ttl_s=30)
    for key in KeySpace(key_prefix).response_owners("acme"):
        assert key.startswith(f"{key_prefix}{{tenant:acme}}:")
        assert 30_000 < await redis_client.pttl(key) <= 35_000
