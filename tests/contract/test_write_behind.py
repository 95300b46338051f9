"""The write-behind on a real Redis: what reaches Redis when it is closed."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from gateway.state.redis_store import RedisStatsStore, Write
from gateway.state.writebehind import WriteBehind
from tests.contract.conftest import sample

pytestmark = pytest.mark.redis
NOW = 1_000_000.0
WRITES = 5


async def nothing_failed(batch: list[Write], exc: BaseException) -> None:
    raise AssertionError(f"a batch failed on a live Redis: {exc!r}")


async def test_close_lands_every_queued_write_once_at_any_moment_of_a_flush(
    redis_url: str, key_prefix: str
) -> None:
    """Shutdown closes the write-behind while a flush may be under way: close must neither
    hang nor lose or repeat a write (an observation is not idempotent). Closed at a different
    moment each round, from before the first flush to after it."""
    store = RedisStatsStore(Redis.from_url(redis_url), prefix=key_prefix, owns_client=True)
    try:
        for round_ in range(40):
            endpoint_id = f"e{round_}"
            writes = WriteBehind(store, nothing_failed, timeout_s=2.0)
            for _ in range(WRITES):
                writes.submit(Write("observe", endpoint_id, sample=sample(NOW)))
            await asyncio.sleep(round_ * 0.0002)
            async with asyncio.timeout(5):
                await writes.close()
            stats = await store.read([endpoint_id], now=NOW)
            assert stats[endpoint_id].latency.samples == WRITES, round_
    finally:
        await store.close()
