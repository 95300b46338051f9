"""Which endpoint owns a stored response: one short value per response id, kept per tenant.

Each tenant has its own owner map, so an id names a response only within its tenant: another
tenant's request can neither read nor overwrite it. Writes are create-only (a new response) or
update-only (the same response's tokens, when it ends): an owner is never replaced by another.
A map holds at most `cap` owners per tenant; beyond it the oldest created go first, and each
owner lives until its endpoint's retention (`ttl_s`) passes, so a tenant's records are bounded
by count and age (expired ones count toward the cap until they are evicted or their map
expires).

Two stores keep one contract (tests/contract/test_response_owners.py): `MemoryOwnerStore` for
one replica, `RedisOwnerStore` for many (one call each: the `owner_put` script, HGET, or HDEL
and ZREM in one pipeline; the keys from gateway/state/keys.py). While Redis fails to answer
within the timeout, calls are served from this replica's memory, as the stats store degrades
(gateway/state/resilient.py): an owner written then is known here only.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Protocol

from gateway.config.settings import STORED_RESPONSES_PER_TENANT
from gateway.state.keys import TTL_MARGIN_S, ttl_ms
from gateway.state.redis_calls import text
from gateway.state.redis_store import FAILURES, RedisStatsStore
from gateway.state.resilient import ResilientStore
from gateway.state.store import StatsStore


class OwnerStore(Protocol):
    async def put(
        self,
        tenant: str,
        response_id: str,
        value: str,
        *,
        ttl_s: float,
        now: float,
        create: bool,
    ) -> bool:
        """`create`: only where the tenant has no live owner of that id; else only over a live
        one (which keeps its expiry). Whether it was written."""
        ...

    async def get(self, tenant: str, response_id: str, *, now: float) -> str | None: ...

    async def delete(self, tenant: str, response_id: str) -> None: ...


class MemoryOwnerStore:
    def __init__(self, cap: int = STORED_RESPONSES_PER_TENANT) -> None:
        self.cap = cap
        # per tenant, in the order created: response id -> (value, expiry)
        self._tenants: dict[str, OrderedDict[str, tuple[str, float]]] = {}

    async def put(
        self,
        tenant: str,
        response_id: str,
        value: str,
        *,
        ttl_s: float,
        now: float,
        create: bool,
    ) -> bool:
        owners = self._tenants.setdefault(tenant, OrderedDict())
        found = owners.get(response_id)
        live = found is not None and found[1] > now
        if live == create:
            return False
        if found is not None and not live:
            del owners[response_id]  # expired: created anew, at the end of the order
        owners[response_id] = (value, found[1] if live and found else now + ttl_s)
        while len(owners) > self.cap:
            owners.popitem(last=False)
        return True

    async def get(self, tenant: str, response_id: str, *, now: float) -> str | None:
        owners = self._tenants.get(tenant)
        found = owners.get(response_id) if owners is not None else None
        return found[0] if found is not None and found[1] > now else None

    async def delete(self, tenant: str, response_id: str) -> None:
        owners = self._tenants.get(tenant)
        if owners is not None:
            owners.pop(response_id, None)


class RedisOwnerStore:
    """Redis, and this replica's memory for the calls Redis does not answer in time."""

    def __init__(
        self, stats: RedisStatsStore, *, timeout_s: float, cap: int = STORED_RESPONSES_PER_TENANT
    ) -> None:
        self.stats = stats
        self.timeout_s = timeout_s
        self.cap = cap
        self.local = MemoryOwnerStore(cap)

    async def put(
        self,
        tenant: str,
        response_id: str,
        value: str,
        *,
        ttl_s: float,
        now: float,
        create: bool,
    ) -> bool:
        now_ms = round(now * 1000)
        args = [
            response_id,
            value,
            now_ms,
            now_ms + ttl_ms(ttl_s),
            self.cap,
            int(create),
            ttl_ms(ttl_s + TTL_MARGIN_S),
        ]
        try:
            async with asyncio.timeout(self.timeout_s):
                keys = list(self.stats.keys.response_owners(tenant))
                return bool(await self.stats.evaluate("owner_put", keys=keys, args=args))
        except FAILURES:
            return await self.local.put(
                tenant, response_id, value, ttl_s=ttl_s, now=now, create=create
            )

    async def get(self, tenant: str, response_id: str, *, now: float) -> str | None:
        owners, _ = self.stats.keys.response_owners(tenant)
        try:
            async with asyncio.timeout(self.timeout_s):
                found = await self.stats.client.hget(owners, response_id)
        except FAILURES:
            return await self.local.get(tenant, response_id, now=now)
        if found is None:
            return await self.local.get(tenant, response_id, now=now)
        expiry_ms, _, value = text(found).partition(":")
        return value if int(expiry_ms) > now * 1000 else None

    async def delete(self, tenant: str, response_id: str) -> None:
        await self.local.delete(tenant, response_id)
        owners, order = self.stats.keys.response_owners(tenant)
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self.stats.client.pipeline(transaction=False) as pipe:
                    pipe.hdel(owners, response_id)
                    pipe.zrem(order, response_id)
                    await pipe.execute()
        except FAILURES:
            return


def owner_store_for(store: StatsStore, cap: int = STORED_RESPONSES_PER_TENANT) -> OwnerStore:
    """Owners kept where the stats are: Redis when the stats store is Redis, else memory."""
    primary = store.primary if isinstance(store, ResilientStore) else store
    if isinstance(primary, RedisStatsStore):
        timeout_s = store.timeout_s if isinstance(store, ResilientStore) else 0.25
        return RedisOwnerStore(primary, timeout_s=timeout_s, cap=cap)
    return MemoryOwnerStore(cap)
