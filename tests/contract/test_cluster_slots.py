"""Proof that every Lua script touches keys of one Redis Cluster hash slot: every script call
site runs against a real 3-master cluster through a client that records the keys of each
EVALSHA it sends, and each call's keys must hash to one slot (redis-py's `key_slot`, the
CRC16 Redis Cluster uses). The scripts themselves name no key but KEYS[n]."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import pytest
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from gateway.state.redis_store import SCRIPTS, RedisStatsStore, Write
from tests.contract.conftest import sample
from tests.contract.test_redis_wire import NOW, exercise_every_key

pytestmark = pytest.mark.redis
# A call whose first argument (the key) is a literal or built string, not a KEYS entry.
_LITERAL_KEY = re.compile(r"redis\.p?call\(\s*'\w+'\s*,\s*['\".]")


class RecordingCluster(RedisCluster):
    """The real cluster client, noting each script call's keys before sending it."""

    calls: list[tuple[str, list[bytes | str]]]

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if str(args[0]).upper() == "EVALSHA":
            self.calls.append((str(args[1]), list(args[3 : 3 + int(args[2])])))
        return await super().execute_command(*args, **kwargs)


@pytest.fixture
async def recording(cluster_url: str) -> AsyncIterator[RecordingCluster]:
    hosts = cluster_url.split("://", 1)[1].split(",")
    nodes = [ClusterNode(h.split(":")[0], int(h.split(":")[1])) for h in hosts]
    client = RecordingCluster(startup_nodes=nodes)
    client.calls = []
    yield client
    await client.aclose()


async def test_every_script_call_touches_one_slot(recording: RecordingCluster) -> None:
    store = RedisStatsStore(recording, prefix="sgtest:slots:")
    await exercise_every_key(store)
    names = {script.sha: name for name, script in store._scripts.items()}
    called = {names[sha] for sha, _ in recording.calls}
    assert called == set(SCRIPTS)
    for sha, keys in recording.calls:
        assert len({key_slot(str(k).encode()) for k in keys}) == 1, (names[sha], keys)


async def test_a_write_batch_over_many_slots_lands_on_a_cluster(
    recording: RecordingCluster,
) -> None:
    """The write-behind's pipeline spans endpoints on every master; redis-py splits it per
    node, and each script call in it still touches one slot."""
    store = RedisStatsStore(recording, prefix="sgtest:batch:")
    endpoints = [f"e{i}" for i in range(12)]
    writes = [Write("acquire", e, "r1", 30, NOW) for e in endpoints]
    writes += [Write("observe", e, sample=sample(NOW)) for e in endpoints]
    replies = await store.write_batch(writes)
    assert not [r for r in replies if isinstance(r, Exception)]
    assert len({key_slot(store.keys.leases(e).encode()) for e in endpoints}) > 1
    assert await store.read_in_flight(endpoints, now=NOW) == dict.fromkeys(endpoints, 1)
    stats = await store.read(endpoints, now=NOW)
    assert {e: stats[e].latency.samples for e in endpoints} == dict.fromkeys(endpoints, 1)


def test_scripts_name_keys_only_through_keys() -> None:
    for name in SCRIPTS:
        source = (resources.files("gateway.state") / "lua" / f"{name}.lua").read_text()
        assert not _LITERAL_KEY.search(source), name
        assert "KEYS[" in source, name
