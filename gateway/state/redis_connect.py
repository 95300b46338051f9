"""The Redis client named by GATEWAY_REDIS_URL: one node, a Redis Cluster, or Sentinel.

    redis://[user:pass@]host:port/db   rediss://...   unix:///path/to.sock   one node
    redis+cluster://[user:pass@]host:port,host:port,...   (rediss+cluster:// for TLS)
        redis-py's cluster client, started from any of the listed nodes (it learns the others);
        every key of one Lua script shares a `{...}` hash tag (gateway/state/keys.py), so each
        script runs on the one master that owns its slot.
    redis+sentinel://[user:pass@]host:port,host:port,.../service_name[/db]
        (rediss+sentinel:// for TLS to the master) the master Sentinel names for the service;
        after a failover the client reconnects to the new one.

Every form gets the same bounded timeouts, and a connection pool per node (per master for
Sentinel) that makes a burst wait for a connection instead of failing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

from gateway.config.settings import ConfigError

MAX_CONNECTIONS = 64
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
Client = Redis | RedisCluster


@dataclass(frozen=True)
class Connection:
    client: Client
    ping: Callable[[], Awaitable[Any]]
    kind: str  # "redis", "cluster" or "sentinel": reported in /readyz and logs


def connect(url: str, *, timeout_s: float, max_connections: int = MAX_CONNECTIONS) -> Connection:
    """A client for `url` (no I/O yet: connections open on first use)."""
    scheme = url.split("://", 1)[0].lower()
    if scheme in CLUSTER_SCHEMES:
        return _cluster(url, timeout_s, max_connections)
    if scheme in SENTINEL_SCHEMES:
        return _sentinel(url, timeout_s, max_connections)
    # A blocking pool: under a burst, calls wait for a connection (bounded by the timeout)
    # instead of failing with "too many connections" and sending the replica to local state.
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )
    client = Redis.from_pool(pool)  # the client owns the pool: closing it disconnects all
    return Connection(client, client.ping, "redis")


class _Hosts(NamedTuple):
    nodes: list[tuple[str, int]]
    username: str | None
    password: str | None
    path: str


def _hosts(url: str) -> _Hosts:
    """The comma-separated host:port list, the credentials and the path of a multi-host URL."""
    parts = urlsplit(url)
    credentials, _, hosts = parts.netloc.rpartition("@")
    user, _, password = credentials.partition(":")
    nodes = []
    for host in filter(None, hosts.split(",")):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise ConfigError(
                f"GATEWAY_REDIS_URL: {host!r} is not host:port "
                "(e.g. redis+cluster://10.0.0.1:6379,10.0.0.2:6379)"
            )
        nodes.append((name.strip("[]"), int(port)))
    if not nodes:
        raise ConfigError("GATEWAY_REDIS_URL: list at least one host:port after the scheme")
    return _Hosts(nodes, unquote(user) or None, unquote(password) or None, parts.path.strip("/"))


def _cluster(url: str, timeout_s: float, max_connections: int) -> Connection:
    hosts = _hosts(url)
    client = RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in hosts.nodes],
        ssl=url.lower().startswith("rediss"),
        max_connections=max_connections,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        username=hosts.username,
        password=hosts.password,
    )
    return Connection(client, client.ping, "cluster")


class _SentinelMaster(Redis):
    """The master's client, which also closes its connections to the Sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        assert isinstance(pool, SentinelConnectionPool)  # what master_for builds
        for sentinel in pool.sentinel_manager.sentinels:
            await sentinel.aclose()


def _sentinel(url: str, timeout_s: float, max_connections: int) -> Connection:
    hosts = _hosts(url)
    service, _, db = hosts.path.partition("/")
    if not service:
        raise ConfigError(
            "GATEWAY_REDIS_URL: name the Sentinel service after the hosts "
            "(redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster)"
        )
    timeouts = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    sentinel = Sentinel(
        hosts.nodes,
        sentinel_kwargs=timeouts,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )
    client = sentinel.master_for(
        service,
        redis_class=_SentinelMaster,
        db=int(db or 0),
        ssl=url.lower().startswith("rediss"),
        max_connections=max_connections,
        username=hosts.username,
        password=hosts.password,
    )
    return Connection(client, client.ping, "sentinel")
