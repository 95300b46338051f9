"""An in-process gateway on a real Redis, and what its keys hold, for fault tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from gateway.config.settings import Settings, parse_config
from gateway.server.app import create_app
from gateway.state.keys import KeySpace
from tests.fixtures.servers import UvicornThread


@contextmanager
def redis_gateway(data: dict[str, Any], redis_url: str, prefix: str) -> Iterator[str]:
    """A gateway whose shared state lives under `prefix` in `redis_url`; yields its URL."""
    settings = Settings.model_validate({"GATEWAY_REDIS_URL": redis_url, "redis_prefix": prefix})
    with UvicornThread(create_app(parse_config(data, "test"), settings)) as server:
        yield server.base_url


def live_leases(redis_url: str, prefix: str, endpoint_ids: list[str]) -> int:
    """Unexpired endpoint leases in Redis, over all replicas."""
    return _count(redis_url, [KeySpace(prefix).leases(eid) for eid in endpoint_ids])


def tenant_leases(redis_url: str, prefix: str, tenant: str) -> int:
    """Unexpired tenant concurrency slots in Redis."""
    return _count(redis_url, [KeySpace(prefix).tenant(tenant, "concurrency")])


def _count(redis_url: str, keys: list[str]) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        now = time.time()
        return sum(int(client.zcount(key, now, "+inf")) for key in keys)
    finally:
        client.close()
