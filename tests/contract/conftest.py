"""Every StatsStore test runs against both stores: memory, and a real Redis (never a mock).

`stores.open(count)` gives `count` clients sharing one state: for Redis, stores on separate
connection pools (as separate replicas would have); for memory, the one in-process store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.state.memory_store import MemoryStatsStore
from gateway.state.redis_store import RedisStatsStore
from gateway.state.store import StatsStore
from tests.fixtures.redis import key_prefix, redis_client, redis_url

__all__ = ["key_prefix", "redis_client", "redis_url"]


class StoreClients:
    def __init__(self, kind: str, redis_url: str = "", prefix: str = "") -> None:
        self.kind = kind
        self.redis_url = redis_url
        self.prefix = prefix
        self._opened: list[StatsStore] = []

    def open(self, count: int = 1, **options: Any) -> list[StatsStore]:
        if self.kind == "memory":
            shared = MemoryStatsStore(**options)
            self._opened.append(shared)
            return [shared] * count
        opened: list[StatsStore] = [
            RedisStatsStore(
                Redis.from_url(self.redis_url), prefix=self.prefix, owns_client=True, **options
            )
            for _ in range(count)
        ]
        self._opened += opened
        return opened

    async def aclose(self) -> None:
        for store in self._opened:
            await store.close()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[StoreClients]:
    if request.param == "redis":
        clients = StoreClients(
            "redis", request.getfixturevalue("redis_url"), request.getfixturevalue("key_prefix")
        )
    else:
        clients = StoreClients("memory")
    yield clients
    await clients.aclose()


@pytest.fixture
def store(stores: StoreClients) -> StatsStore:
    return stores.open()[0]
