"""Per-request cost of the shared-state layer: the Redis store against the memory store.

One request's state work: acquire a lease, read 4 endpoints (one pipelined round trip: either
the full `read()` or only `read_in_flight()`, when estimates come from a snapshot refreshed in
the background), observe the finished request, release the lease; sequentially and with
requests in flight concurrently (wall time per request). Each endpoint's window
is pre-filled (every 5 s bucket holds samples) so reads parse a realistic amount of data.
Both stores run in the same process and the same run; the ratio is what to quote.

    .venv/bin/python -m benchmarks.state_layer [--requests 1000] [--concurrency 16]

Redis: REDIS_URL, else 127.0.0.1:6379, else a throwaway server (tests/fixtures/redis.py). Keys
go under a unique prefix that is deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from gateway.state.memory_store import MemoryStatsStore
from gateway.state.redis_store import RedisStatsStore
from gateway.state.store import LatencySample, StatsStore
from tests.fixtures.redis import delete_prefix, running_redis_url

ENDPOINTS = ["ep-a", "ep-b", "ep-c", "ep-d"]


def _sample(at_s: float, i: int) -> LatencySample:
    return LatencySample(
        at_s=at_s,
        ok=i % 50 != 0,
        status=200 if i % 50 else 500,
        prompt_tokens=200 + 37 * (i % 40),
        output_tokens=120,
        ttft_s=0.05 + 0.001 * (i % 40),
        tpot_s=0.02 + 0.001 * (i % 7),
        e2e_s=2.5,
        in_flight=i % 9,
    )


async def prefill(store: StatsStore, now: float) -> None:
    for i in range(240):  # 4 per endpoint per 5 s bucket over the 60 s window
        await store.observe(ENDPOINTS[i % 4], _sample(now - 60 + i * 0.25, i))


async def full_read_request(store: StatsStore, i: int) -> None:
    """Per request: a full read of every candidate."""
    await _request(store, i, lambda now: store.read(ENDPOINTS, now=now))


async def snapshot_request(store: StatsStore, i: int) -> None:
    """Per request with estimates from a background snapshot: only in-flight counts are read."""
    await _request(store, i, lambda now: store.read_in_flight(ENDPOINTS, now=now))


async def _request(store: StatsStore, i: int, read: Callable[[float], Awaitable[object]]) -> None:
    """One request's store calls: lease, the read, the observation, release."""
    endpoint, request_id, now = ENDPOINTS[i % 4], f"bench-{i}", time.time()
    await store.acquire(endpoint, request_id, ttl_s=300, now=now)
    await read(now)
    await store.observe(endpoint, _sample(now, i))
    await store.release(endpoint, request_id, now=now)


async def full_read(store: StatsStore, i: int) -> None:
    await store.read(ENDPOINTS, now=time.time())


async def in_flight_read(store: StatsStore, i: int) -> None:
    await store.read_in_flight(ENDPOINTS, now=time.time())


async def per_request_us(
    store: StatsStore, work: Callable[[StatsStore, int], Awaitable[None]], n: int, concurrency: int
) -> float:
    """Wall time per request with `concurrency` requests in flight."""
    gate = asyncio.Semaphore(concurrency)

    async def bounded(i: int) -> None:
        async with gate:
            await work(store, i)

    await asyncio.gather(*(bounded(i) for i in range(min(n, 50))))  # warm-up
    started = time.perf_counter()
    await asyncio.gather(*(bounded(i) for i in range(n)))
    return (time.perf_counter() - started) / n * 1e6


async def measure(store: StatsStore, n: int, concurrency: int) -> dict[str, float]:
    await prefill(store, time.time())
    return {
        "request w/ read(), serial": await per_request_us(store, full_read_request, n, 1),
        f"request w/ read(), {concurrency} conc.": await per_request_us(
            store, full_read_request, n, concurrency
        ),
        "request w/ in-flight, serial": await per_request_us(store, snapshot_request, n, 1),
        f"request w/ in-flight, {concurrency} conc.": await per_request_us(
            store, snapshot_request, n, concurrency
        ),
        "read() of 4 endpoints": await per_request_us(store, full_read, n, 1),
        "read_in_flight() of 4": await per_request_us(store, in_flight_read, n, 1),
    }


async def main(n: int, concurrency: int) -> None:
    with running_redis_url() as url:
        prefix = f"sgbench:{uuid.uuid4().hex[:8]}:"
        redis_store = RedisStatsStore(Redis.from_url(url), prefix=prefix, owns_client=True)
        try:
            memory = await measure(MemoryStatsStore(), n, concurrency)
            shared = await measure(redis_store, n, concurrency)
        finally:
            await redis_store.close()
            delete_prefix(url, prefix)
    print(f"state-layer cost per request ({n} requests, Redis at {url})")
    print(f"{'µs per operation':28} {'memory':>10} {'redis':>10} {'ratio':>8}")
    for name in memory:
        ratio = shared[name] / memory[name]
        print(f"{name:28} {memory[name]:10.1f} {shared[name]:10.1f} {ratio:7.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.concurrency))
