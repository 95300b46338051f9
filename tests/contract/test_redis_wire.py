"""What only the Redis store can show: round trips, TTLs, hash slots, script files."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import pytest
from redis.asyncio import Connection, ConnectionPool, Redis
from redis.crc import key_slot

from gateway.state.breaker import BreakerPolicy
from gateway.state.control import SWAP_SCRIPT
from gateway.state.owners import RedisOwnerStore
from gateway.state.redis_store import SCRIPTS, RedisStatsStore, Write
from gateway.state.store import TenantCharge, TenantQuota
from gateway.state.usage import BudgetQuota, Settlement, UsageLine
from tests.contract.conftest import sample

pytestmark = pytest.mark.redis
NOW = 1_000_000.0
ENDPOINTS = ["a", "b", "c", "d"]


class CountingConnection(Connection):
    """A real connection that counts the writes it sends: one write per round trip."""

    writes = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.writes += 1
        await super().send_packed_command(command, check_health)


@pytest.fixture
async def counted(redis_url: str, key_prefix: str) -> AsyncIterator[RedisStatsStore]:
    pool = ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    store = RedisStatsStore(Redis(connection_pool=pool), prefix=key_prefix, owns_client=True)
    yield store
    await store.close()
    await pool.aclose()


async def round_trips(store: RedisStatsStore, operation: Any) -> int:
    await operation()  # warm: connect, load scripts
    before = CountingConnection.writes
    await operation()
    return CountingConnection.writes - before


async def test_each_hot_path_operation_is_one_round_trip(counted: RedisStatsStore) -> None:
    for eid in ENDPOINTS:
        await counted.observe(eid, sample(NOW))

    async def read() -> None:
        await counted.read(ENDPOINTS, now=NOW)

    async def read_in_flight() -> None:
        await counted.read_in_flight(ENDPOINTS, now=NOW)

    async def acquire() -> None:
        await counted.acquire("a", "r1", ttl_s=30, now=NOW)

    async def observe() -> None:
        await counted.observe("a", sample(NOW))

    async def release() -> None:
        await counted.release("a", "r1", now=NOW)

    for operation in (read, read_in_flight, acquire, observe, release):
        assert await round_trips(counted, operation) == 1, operation.__name__


async def test_a_sealed_bucket_is_read_once_and_an_own_late_write_read_again(
    redis_url: str, key_prefix: str
) -> None:
    """Buckets two or more behind the newest are read once: a write to one by another
    replica (as late as no write should be) is not read again, the newest two are read on
    every call, this replica's own write to a sealed bucket unseals it, and reads at once
    agree."""
    store = RedisStatsStore(Redis.from_url(redis_url), prefix=key_prefix, owns_client=True)
    other = RedisStatsStore(Redis.from_url(redis_url), prefix=key_prefix, owns_client=True)
    third = RedisStatsStore(Redis.from_url(redis_url), prefix=key_prefix, owns_client=True)
    old, recent = NOW - 3 * store.bucket_s, NOW - store.bucket_s
    try:
        for at_s in (old, recent, NOW):
            await store.observe("a", sample(at_s))

        async def samples() -> int:
            stats = await store.read(["a"], now=NOW)
            return stats["a"].latency.samples

        assert await samples() == 3
        await other.observe("a", sample(old))  # sealed here: not read again
        await other.observe("a", sample(recent))  # the newest two are read every time
        assert await samples() == 4
        fresh = await other.read(["a"], now=NOW)
        assert fresh["a"].latency.samples == 5  # a replica that never sealed it reads it all
        await store.observe("a", sample(old))  # our own late write: read again
        assert await samples() == 6
        # reads running at once (the view's and the health probes') on a store that has
        # sealed nothing yet: each reads what was sealed when it started
        reads = [third.read(["a", "b"], now=NOW) for _ in range(8)]
        assert {stats["a"].latency.samples for stats in await asyncio.gather(*reads)} == {6}
    finally:
        for opened in (store, other, third):
            await opened.close()


async def test_a_write_batch_is_one_round_trip_in_order(counted: RedisStatsStore) -> None:
    """The write-behind's flush: many requests' takes, drops and observations in one pipeline
    (scripts by EVALSHA alone, no SCRIPT EXISTS first), applied in order, so a drop after its
    take leaves no lease and a take after a drop stays counted."""
    writes = [Write("acquire", "a", f"r{i}", 30, NOW) for i in range(20)]
    writes += [Write("observe", "a", sample=sample(NOW)) for _ in range(20)]
    writes += [Write("release", "a", f"r{i}") for i in range(19)]

    async def batch() -> None:
        await counted.write_batch(writes)

    assert await round_trips(counted, batch) == 1
    assert await counted.read_in_flight(["a"], now=NOW) == {"a": 1}
    stats = await counted.read(["a"], now=NOW)
    assert stats["a"].latency.samples == 40  # the batch ran twice: warm-up, then counted


async def exercise_every_key(store: RedisStatsStore) -> None:
    policy = BreakerPolicy(failure_threshold=1)
    await store.acquire("a", "r1", ttl_s=30, now=NOW)
    quota = TenantQuota(requests=5, tokens=1000, concurrent=3)
    budget = BudgetQuota(day_pusd=10**12, month_pusd=10**13, soft_fraction=0.5)
    await store.admit_tenant(
        TenantCharge("acme", "r1", 10, quota, ttl_s=30, now=NOW, budget=budget, hold_pusd=9)
    )
    await store.admit_tenant(
        TenantCharge("acme", "r2", 10, quota, ttl_s=30, now=NOW, budget=budget, hold_pusd=7)
    )
    line = UsageLine("interactive", "m", "a", 10, 2, 5, 10**12)
    await store.settle(Settlement("acme", NOW, 0, 10, 7, 60.0, line, budget, "r1", 9))
    await store.observe("a", sample(NOW))
    await store.hit("tenant:acme:rpm", cost=1, window_s=60, now=NOW)
    await store.try_hit("tenant:acme:tpm", cost=100, limit=1000, window_s=60, now=NOW)
    await store.record_result("a", ok=False, now=NOW, policy=policy)
    await store.claim_trial("a", now=NOW + 60, policy=policy)
    await store.record_result("b", ok=False, now=NOW, policy=BreakerPolicy())
    await store.cool_down("c", until_s=NOW + 3600, now=NOW)
    owners = RedisOwnerStore(store, timeout_s=1.0)
    await owners.put("acme", "resp_1", "{}", ttl_s=60, now=NOW, create=True)
    await store.charge_fair_share("interactive", {"acme": 10.0}, now=NOW)


async def test_every_key_has_a_ttl(redis_client: Redis, redis_url: str, key_prefix: str) -> None:
    store = RedisStatsStore(redis_client, prefix=key_prefix)
    await exercise_every_key(store)
    found = [key async for key in redis_client.scan_iter(match=f"{key_prefix}*")]
    # incl. a tenant's three limit keys, its day and month spend, a day alert, a usage hour,
    # its budget holds and their sum, its stored-response owners and their order, a class's
    # fairness counters and when each was charged, and a fast-window bucket
    assert len(found) == 21
    for key in found:
        assert await redis_client.pttl(key) > 0, key
    assert await redis_client.pttl(store.keys.health("c")) > 3600_000


async def test_a_tenants_keys_share_one_cluster_slot(redis_client: Redis, key_prefix: str) -> None:
    """The admission, settlement and owner scripts touch them together."""
    store = RedisStatsStore(redis_client, prefix=key_prefix)
    await exercise_every_key(store)
    found = [key async for key in redis_client.scan_iter(match=f"{key_prefix}{{tenant:acme}}*")]
    # requests, tokens, concurrency, day and month spend, alert, usage, holds and their sum,
    # owners and their order
    assert len(found) == 11
    assert len({key_slot(key) for key in found}) == 1


async def test_an_endpoints_keys_share_one_cluster_slot(
    redis_client: Redis, key_prefix: str
) -> None:
    store = RedisStatsStore(redis_client, prefix=key_prefix)
    await exercise_every_key(store)
    found = [key async for key in redis_client.scan_iter(match=f"{key_prefix}{{ep:a}}*")]
    assert len(found) == 4  # leases, health, a latency bucket, a fast-window bucket
    assert len({key_slot(key) for key in found}) == 1


async def test_a_bucket_lives_one_window_after_its_last_write(
    redis_client: Redis, key_prefix: str
) -> None:
    store = RedisStatsStore(redis_client, prefix=key_prefix, window_s=60, bucket_s=5)
    await store.observe("a", sample(NOW))
    ttl_ms = await redis_client.pttl(store.keys.latency("a", 200_000))
    assert 60_000 < ttl_ms <= 65_000


def test_lua_scripts_are_package_files_with_a_header() -> None:
    scripts = [
        entry
        for entry in (resources.files("gateway.state") / "lua").iterdir()
        if entry.name.endswith(".lua")
    ]
    assert {s.name.removesuffix(".lua") for s in scripts} == {*SCRIPTS, SWAP_SCRIPT}
    for script in scripts:
        text = script.read_text()
        for marker in ("-- KEYS[1]", "-- ARGV[1]", "-- returns"):
            assert marker in text, (script.name, marker)
