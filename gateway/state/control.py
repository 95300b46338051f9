"""The control records the admin API makes (API keys and tenants), shared by every replica.

A record is an opaque JSON string here (gateway/config/api_records.py gives it its schema). A
version counter, bumped by every change, lets each replica poll one cheap read and reload the
records only when something changed (gateway/server/control_plane.py).

    version     the counter alone: what each replica polls
    read        the counter and every record (the counter read first: a change landing between
                the reads shows up again at the next poll)
    swap        compare and set one record: written only if it still holds what the caller
                read (None: absent), so two admins changing one key never lose a change
    refresh     extend the records' TTL (keys.CONTROL_TTL_S), by every running replica

Two implementations keep one contract (tests/contract/test_control_records.py):
`MemoryControlStore` for one replica, `RedisControlStore` for many sharing one Redis.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Literal, Protocol

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from gateway.state import keys
from gateway.state.keys import KeySpace
from gateway.state.redis_store import RedisStatsStore
from gateway.state.resilient import ResilientStore
from gateway.state.store import StatsStore
from gateway.telemetry.metrics import log

SWAP_SCRIPT = "control_swap"  # lua/, apart from the stats store's SCRIPTS

Kind = Literal["keys", "tenants"]
KINDS: tuple[Kind, ...] = ("keys", "tenants")
# How often each replica (each worker) reads the version: a change reaches every one of them
# within this and one read of the records.
POLL_S = 0.25
REFRESH_S = 3600.0  # how often each replica extends the records' TTL
FAILURES = (RedisError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class ControlRecords:
    version: int = 0
    keys: Mapping[str, str] = field(default_factory=dict)
    tenants: Mapping[str, str] = field(default_factory=dict)


class ControlStore(Protocol):
    async def version(self) -> int: ...

    async def read(self) -> ControlRecords: ...

    async def swap(self, kind: Kind, name: str, expected: str | None, new: str | None) -> bool:
        """Set (or, `new` None, delete) a record if it holds `expected` (None: absent)."""
        ...

    async def refresh(self) -> None: ...


class MemoryControlStore:
    def __init__(self) -> None:
        self._version = 0
        self._records: dict[Kind, dict[str, str]] = {kind: {} for kind in KINDS}

    async def version(self) -> int:
        return self._version

    async def read(self) -> ControlRecords:
        return ControlRecords(
            self._version, dict(self._records["keys"]), dict(self._records["tenants"])
        )

    async def swap(self, kind: Kind, name: str, expected: str | None, new: str | None) -> bool:
        records = self._records[kind]
        if records.get(name) != expected:
            return False
        if new is None:
            records.pop(name, None)
        else:
            records[name] = new
        self._version += 1
        return True

    async def refresh(self) -> None:
        """Memory keeps its records while the process lives."""


class RedisControlStore:
    """Over the stats store's client (which owns and closes it)."""

    def __init__(self, client: Redis | RedisCluster, prefix: str = keys.PREFIX) -> None:
        self.client = client
        self.keys = KeySpace(prefix)
        source = (resources.files("gateway.state") / "lua" / f"{SWAP_SCRIPT}.lua").read_text()
        self._swap = client.register_script(source)

    async def version(self) -> int:
        return int(await self.client.get(self.keys.control("version")) or 0)

    async def read(self) -> ControlRecords:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.control("version"))
            for kind in KINDS:
                pipe.hgetall(self.keys.control(kind))
            version, found_keys, tenants = await pipe.execute()
        return ControlRecords(int(version or 0), _texts(found_keys), _texts(tenants))

    async def swap(self, kind: Kind, name: str, expected: str | None, new: str | None) -> bool:
        other: Kind = "tenants" if kind == "keys" else "keys"
        names = [self.keys.control(kind), self.keys.control("version"), self.keys.control(other)]
        ttl = keys.ttl_ms(keys.CONTROL_TTL_S)
        version = await self._swap(keys=names, args=[name, expected or "", new or "", ttl])
        return int(version) > 0

    async def refresh(self) -> None:
        ttl = keys.ttl_ms(keys.CONTROL_TTL_S)
        async with self.client.pipeline(transaction=False) as pipe:
            for part in ("keys", "tenants", "version"):
                pipe.pexpire(self.keys.control(part), ttl)
            await pipe.execute()


def _texts(found: Mapping[bytes | str, bytes | str]) -> dict[str, str]:
    def text(value: bytes | str) -> str:
        return value.decode() if isinstance(value, bytes) else value

    return {text(name): text(value) for name, value in found.items()}


def control_store_for(store: StatsStore) -> ControlStore:
    """The control records beside the stats: in the same Redis (under the same prefix), else
    in memory (one replica, or a store a test built)."""
    primary = store.primary if isinstance(store, ResilientStore) else store
    if isinstance(primary, RedisStatsStore):
        return RedisControlStore(primary.client, primary.keys.prefix)
    return MemoryControlStore()


async def follow_records(
    store: ControlStore, apply: Callable[[ControlRecords], None], poll_s: float = POLL_S
) -> None:
    """Owned by the app lifespan: read the version every `poll_s`, and `apply` the records
    whenever it changed (and once at start). While the store is unreachable the records last
    read stay in force; the outage is logged once."""
    seen, refreshed_at, failing = -1, 0.0, False
    while True:
        try:
            if await store.version() != seen:
                records = await store.read()
                apply(records)
                seen = records.version
            if time.monotonic() - refreshed_at > REFRESH_S:
                await store.refresh()
                refreshed_at = time.monotonic()
            failing = False
        except FAILURES as exc:
            if not failing:
                log.warning("control records unreachable (%r); the last read stay in force", exc)
            failing = True
        await asyncio.sleep(poll_s)
