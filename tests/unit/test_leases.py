"""Leases outlive their TTL while held (refreshed), and vanish once dropped."""

from __future__ import annotations

import asyncio
import time

from gateway.state.background import Background
from gateway.state.leases import LeaseBook
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.view import SharedView
from gateway.telemetry.metrics import Metrics


async def shared_count(store: MemoryStatsStore) -> int:
    return (await store.read_in_flight(["e"], now=time.time()))["e"]


async def test_a_lease_held_past_its_ttl_stays_counted_until_dropped() -> None:
    store = MemoryStatsStore()
    background = Background()
    leases = LeaseBook(store, SharedView(store, ["e"], 0.1), Metrics(), background, ttl_s=0.3)
    refreshing = asyncio.create_task(leases.run())
    try:
        leases.take("e", "long-stream", tokens=100)
        await asyncio.sleep(0.75)  # 2.5 TTLs
        assert await shared_count(store) == 1
        leases.drop("e", "long-stream")
        await background.drain()
        assert await shared_count(store) == 0
    finally:
        refreshing.cancel()


async def test_without_refresh_a_lease_expires_after_its_ttl() -> None:
    """The contrast: what a crashed replica's leases do (and what `run` prevents)."""
    store = MemoryStatsStore()
    leases = LeaseBook(store, SharedView(store, ["e"], 0.1), Metrics(), Background(), ttl_s=0.3)
    leases.take("e", "orphan", tokens=100)
    await asyncio.sleep(0.01)
    assert await shared_count(store) == 1
    await asyncio.sleep(0.4)
    assert await shared_count(store) == 0
