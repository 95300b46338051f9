"""Every StatsStore test runs against every store, like `limits`' ALL_STORAGES: real Redis, never
a mock.

    memory          MemoryStatsStore, one replica
    redis           RedisStatsStore on a live Redis
    resilient       ResilientStore over a live Redis: lease takes and drops and observations go
                    through its write-behind, everything else to Redis
    resilient-failing   ResilientStore whose Redis port has nothing listening, the outage not
                    confirmed yet: every call tries Redis, fails and is served from its local
                    MemoryStatsStore (write-behind batches fail and are served there in order)
    resilient-down  the same once failing pings confirmed the outage: every call goes to memory
    cluster         RedisStatsStore on a real 3-master Redis Cluster
                    (tests/fixtures/redis_cluster.py, started once per session)
    resilient-cluster   ResilientStore over that cluster, writes through its write-behind
    sentinel        ResilientStore over the master a real Sentinel names

`await stores.open(count)` gives `count` clients sharing one state: for Redis, stores on separate
connection pools (as separate replicas would have); for memory, the one in-process store. With
Redis down, separate replicas share nothing (each serves from its own memory), so a test of
state shared by several clients is skipped there, saying why.

A ResilientStore's writes through the write-behind land a few milliseconds after the call
returns; `landed(*stores)` waits for them (tests read after it, never after a sleep).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.state.memory_store import MemoryStatsStore
from gateway.state.redis_connect import connect
from gateway.state.redis_store import RedisStatsStore
from gateway.state.resilient import ResilientStore
from gateway.state.store import LatencySample, StatsStore
from tests.fixtures.redis import key_prefix, redis_client, redis_url
from tests.fixtures.redis_cluster import started_cluster, started_sentinel
from tests.fixtures.servers import free_port

__all__ = ["key_prefix", "redis_client", "redis_url"]

# Over a live Redis: long enough that no call on a loaded test machine times out (a timed-out
# call is served from memory, which would split the test's state in two). With nothing
# listening a call fails at once whatever the timeout, and an outage is confirmed after two
# timeouts: long for `resilient-failing` (unconfirmed for the whole test), short for
# `resilient-down` (confirmed before the test starts).
TIMEOUTS_S = {"resilient": 2.0, "resilient-failing": 30.0, "resilient-down": 0.05}
WAIT_S = 5.0  # what a bounded wait on an observable condition allows
_markers = itertools.count()


class StoreClients:
    def __init__(self, kind: str, redis_url: str = "", prefix: str = "") -> None:
        self.kind = kind
        self.redis_url = redis_url
        self.prefix = prefix
        self._opened: list[StatsStore] = []

    @property
    def writes_behind(self) -> bool:
        """Lease takes return before any store counted them (see `ResilientStore.acquire`)."""
        return self.kind.startswith("resilient") or self.kind == "sentinel"

    async def open(self, count: int = 1, **options: Any) -> list[StatsStore]:
        if self.kind == "memory":
            shared = MemoryStatsStore(**options)
            self._opened.append(shared)
            return [shared] * count
        if self.kind in ("resilient-failing", "resilient-down") and count > 1:
            pytest.skip("Redis down: each replica serves from its own memory, nothing is shared")
        opened = [self._one(**options) for _ in range(count)]
        self._opened += opened
        if self.kind == "resilient-down":
            await _outage_confirmed(opened[0])
        return opened

    def _one(self, **options: Any) -> StatsStore:
        if self.kind == "redis":
            client = Redis.from_url(self.redis_url)
            return RedisStatsStore(client, prefix=self.prefix, owns_client=True, **options)
        if self.kind in CONNECTED:
            connection = connect(self.redis_url, timeout_s=TIMEOUTS_S["resilient"])
            shared = RedisStatsStore(
                connection.client, prefix=self.prefix, owns_client=True, **options
            )
            if self.kind == "cluster":
                return shared
            return ResilientStore(
                shared,
                MemoryStatsStore(**options),
                connection.ping,
                timeout_s=TIMEOUTS_S["resilient"],
            )
        timeout_s = TIMEOUTS_S[self.kind]
        live = self.kind == "resilient"
        url = self.redis_url if live else f"redis://127.0.0.1:{free_port()}/0"
        client = Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        primary = RedisStatsStore(client, prefix=self.prefix, owns_client=True, **options)
        return ResilientStore(
            primary, MemoryStatsStore(**options), client.ping, timeout_s=timeout_s
        )

    async def aclose(self) -> None:
        for store in self._opened:
            await store.close()


def sample(at_s: float) -> LatencySample:
    """One successful request finishing at `at_s`."""
    return LatencySample(
        at_s=at_s,
        ok=True,
        status=200,
        prompt_tokens=300,
        output_tokens=20,
        ttft_s=0.2,
        tpot_s=0.03,
        e2e_s=0.8,
        in_flight=2,
    )


async def landed(*stores: StatsStore) -> None:
    """Wait until every lease take and drop and observation made through `stores` so far can be
    read back. Other stores have written once the call returned. A ResilientStore sends its
    writes one batch after another, each in submission order (or, a batch that failed, serves
    it locally in that order), so a marker lease taken now is readable only after all of them:
    poll for it (bounded), then drop it. Only the store's public API is used."""
    for store in stores:
        if isinstance(store, ResilientStore):
            await _marker_landed(store)


async def _marker_landed(store: ResilientStore) -> None:
    marker = f"marker-{next(_markers)}"
    await store.acquire(marker, "marker", ttl_s=3600, now=0.0)

    async def counted() -> bool:
        return (await store.read_in_flight([marker], now=0.0))[marker] == 1

    await _until(counted, f"the writes before {marker} never landed")
    await store.release(marker, "marker", now=0.0)


async def _outage_confirmed(store: StatsStore) -> None:
    """A deciding call that fails makes the store ping Redis; wait until the failed pings have
    switched it to memory (what /readyz shows as degraded)."""
    assert isinstance(store, ResilientStore)
    await store.read_in_flight(["probe"], now=0.0)

    async def down() -> bool:
        return not store.up

    await _until(down, "the outage was never confirmed")


async def _until(check: Callable[[], Awaitable[bool]], failure: str) -> None:
    """Poll `check` until it holds, failing the test after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not await check():
        assert time.monotonic() < deadline, failure
        await asyncio.sleep(0.002)


STORES = [
    "memory",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("resilient", marks=pytest.mark.redis),
    "resilient-failing",
    "resilient-down",
    pytest.param("cluster", marks=pytest.mark.redis),
    pytest.param("resilient-cluster", marks=pytest.mark.redis),
    pytest.param("sentinel", marks=pytest.mark.redis),
]
# Stores opened from a GATEWAY_REDIS_URL by gateway/state/redis_connect.py: the URL fixture.
CONNECTED = {
    "cluster": "cluster_url",
    "resilient-cluster": "cluster_url",
    "sentinel": "sentinel_url",
}


@pytest.fixture(scope="session")
def cluster_url() -> Iterator[str]:
    with started_cluster() as cluster:
        yield cluster.url


@pytest.fixture(scope="session")
def sentinel_url() -> Iterator[str]:
    with started_sentinel() as setup:
        yield setup.url


@pytest.fixture(params=STORES)
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[StoreClients]:
    if request.param in CONNECTED:  # a throwaway topology: its keys go with it
        url = request.getfixturevalue(CONNECTED[request.param])
        clients = StoreClients(request.param, url, f"sgtest:{uuid.uuid4().hex[:12]}:")
    elif request.param in ("redis", "resilient"):
        clients = StoreClients(
            request.param,
            request.getfixturevalue("redis_url"),
            request.getfixturevalue("key_prefix"),
        )
    else:
        clients = StoreClients(request.param, prefix="sgtest:down:")
    yield clients
    await clients.aclose()


@pytest.fixture
async def store(stores: StoreClients) -> StatsStore:
    return (await stores.open())[0]
