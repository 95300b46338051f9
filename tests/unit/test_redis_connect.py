"""GATEWAY_REDIS_URL forms: the client each builds (no I/O happens until first use), and the
errors that say what form a URL takes. Talking to real clusters and Sentinels is in
tests/contract (the same `connect`, parametrized over live topologies)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from gateway.config.settings import ConfigError
from gateway.state.redis_connect import connect


async def test_one_node_urls_keep_their_pool_and_timeouts() -> None:
    connection = connect("redis://127.0.0.1:6390/2", timeout_s=0.3)
    assert connection.kind == "redis" and isinstance(connection.client, Redis)
    kwargs = connection.client.connection_pool.connection_kwargs
    assert (kwargs["port"], kwargs["db"], kwargs["socket_timeout"]) == (6390, 2, 0.3)
    await connection.client.aclose()


async def test_a_cluster_url_lists_its_startup_nodes_and_credentials() -> None:
    connection = connect("redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001", timeout_s=1)
    client = connection.client
    assert connection.kind == "cluster" and isinstance(client, RedisCluster)
    nodes = {(n.host, n.port) for n in client.nodes_manager.startup_nodes.values()}
    assert nodes == {("10.0.0.1", 7000), ("10.0.0.2", 7001)}
    assert client.connection_kwargs["password"] == "s@cret"
    assert client.connection_kwargs["username"] == "app"
    await client.aclose()


async def test_a_sentinel_url_names_the_service() -> None:
    connection = connect("redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster/3", timeout_s=1)
    pool = connection.client.connection_pool
    assert connection.kind == "sentinel"
    assert pool.service_name == "mymaster"  # type: ignore[attr-defined]
    assert pool.connection_kwargs["db"] == 3
    await connection.client.aclose()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://10.0.0.1:26379", "name the Sentinel service"),
        ("redis+cluster://10.0.0.1", "is not host:port"),
        ("redis+cluster://", "at least one host:port"),
    ],
)
def test_malformed_urls_say_what_form_they_take(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        connect(url, timeout_s=1)
