"""Which endpoint owns a stored response: one short value per response id, with a TTL.

Two stores keep one contract (tests/contract/test_response_owners.py): `MemoryOwnerStore` for
one replica, `RedisOwnerStore` for many (one command per call: SET PX, GET, DEL; the key from
gateway/state/keys.py). While Redis fails to answer within the timeout, calls are served from
this replica's memory, as the stats store degrades (gateway/state/resilient.py): an owner written
then is known here only.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Protocol

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from gateway.state.keys import KeySpace, ttl_ms
from gateway.state.redis_store import FAILURES, RedisStatsStore
from gateway.state.resilient import ResilientStore
from gateway.state.store import StatsStore

MEMORY_CAPACITY = 100_000  # owners kept in memory; the oldest go first


class OwnerStore(Protocol):
    async def put(self, response_id: str, value: str, *, ttl_s: float, now: float) -> None: ...

    async def get(self, response_id: str, *, now: float) -> str | None: ...

    async def delete(self, response_id: str) -> None: ...


class MemoryOwnerStore:
    def __init__(self, capacity: int = MEMORY_CAPACITY) -> None:
        self.capacity = capacity
        self._values: OrderedDict[str, tuple[str, float]] = OrderedDict()

    async def put(self, response_id: str, value: str, *, ttl_s: float, now: float) -> None:
        self._values[response_id] = (value, now + ttl_s)
        self._values.move_to_end(response_id)
        while len(self._values) > self.capacity:
            self._values.popitem(last=False)

    async def get(self, response_id: str, *, now: float) -> str | None:
        found = self._values.get(response_id)
        if found is None:
            return None
        if found[1] <= now:
            del self._values[response_id]
            return None
        return found[0]

    async def delete(self, response_id: str) -> None:
        self._values.pop(response_id, None)


class RedisOwnerStore:
    """Redis, and this replica's memory for the calls Redis does not answer in time."""

    def __init__(self, client: Redis | RedisCluster, keys: KeySpace, *, timeout_s: float) -> None:
        self.client = client
        self.keys = keys
        self.timeout_s = timeout_s
        self.local = MemoryOwnerStore()

    async def put(self, response_id: str, value: str, *, ttl_s: float, now: float) -> None:
        key = self.keys.response_owner(response_id)
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.client.set(key, value, px=ttl_ms(ttl_s))
        except FAILURES:
            await self.local.put(response_id, value, ttl_s=ttl_s, now=now)

    async def get(self, response_id: str, *, now: float) -> str | None:
        try:
            async with asyncio.timeout(self.timeout_s):
                value = await self.client.get(self.keys.response_owner(response_id))
        except FAILURES:
            return await self.local.get(response_id, now=now)
        if value is None:
            return await self.local.get(response_id, now=now)
        return value.decode() if isinstance(value, bytes) else str(value)

    async def delete(self, response_id: str) -> None:
        await self.local.delete(response_id)
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.client.delete(self.keys.response_owner(response_id))
        except FAILURES:
            return


def owner_store_for(store: StatsStore) -> OwnerStore:
    """Owners kept where the stats are: Redis when the stats store is Redis, else memory."""
    primary = store.primary if isinstance(store, ResilientStore) else store
    if isinstance(primary, RedisStatsStore):
        timeout_s = store.timeout_s if isinstance(store, ResilientStore) else 0.25
        return RedisOwnerStore(primary.client, primary.keys, timeout_s=timeout_s)
    return MemoryOwnerStore()
