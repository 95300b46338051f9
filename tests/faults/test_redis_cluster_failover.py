"""A Redis Cluster master killed under the write-behind and the resilient store: calls keep
being answered (from local state while the slot has no master), the replica Valkey promotes
takes the slot over, and shared writes land on it again, scripts reloaded there."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.state.memory_store import MemoryStatsStore
from gateway.state.redis_connect import connect
from gateway.state.redis_store import FAILURES, RedisStatsStore
from gateway.state.resilient import ResilientStore
from tests.contract.conftest import landed, sample
from tests.fixtures.redis_cluster import started_cluster

pytestmark = [pytest.mark.redis, pytest.mark.slow]
TIMEOUT_S = 0.5
FAILOVER_S = 30.0


def resilient(url: str) -> ResilientStore:
    connection = connect(url, timeout_s=TIMEOUT_S)
    shared = RedisStatsStore(connection.client, prefix="sgtest:failover:", owns_client=True)
    return ResilientStore(shared, MemoryStatsStore(), connection.ping, timeout_s=TIMEOUT_S)


async def shared_leases(url: str, endpoint: str) -> int:
    """The endpoint's leases as a fresh client reads them from the cluster (0 while the
    endpoint's slot has no master)."""
    store = RedisStatsStore(
        connect(url, timeout_s=2.0).client, prefix="sgtest:failover:", owns_client=True
    )
    try:
        return (await store.read_in_flight([endpoint], now=time.time()))[endpoint]
    except FAILURES:
        return 0
    finally:
        await store.close()


async def test_a_killed_master_is_replaced_and_shared_writes_resume() -> None:
    with started_cluster(replicas=1) as cluster:
        url = cluster.url
        store = resilient(url)
        await store.acquire("e1", "before", ttl_s=300, now=time.time())
        await landed(store)
        assert await shared_leases(url, "e1") == 1
        cluster.kill_master_of(store.primary.keys.leases("e1"))  # type: ignore[attr-defined]
        deadline = time.monotonic() + FAILOVER_S
        taken = 0
        while await shared_leases(cluster.url, "e1") < 2:  # "before" and one taken since
            assert time.monotonic() < deadline, "shared writes never resumed after the kill"
            taken += 1  # every call answers meanwhile, from Redis or from local state
            await store.acquire("e1", f"during-{taken}", ttl_s=300, now=time.time())
            await store.observe("e1", sample(time.time()))
            await store.read(["e1"], now=time.time())
            await asyncio.sleep(0.2)
        assert cluster.healthy() and len(cluster.live_nodes) == 5
        await store.acquire("e1", "after", ttl_s=300, now=time.time())
        await landed(store)  # read back through the store: it is on the cluster again
        assert store.up
        await store.close()
