"""Fault matrix 4: Redis slowed down mid-load (Redis killed and restarted is in
tests/integration/test_shared_state.py). A slower Redis counts as down, the replica serves from
local state, and shared state is rebuilt once Redis answers in time again."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.faults.clients import Load
from tests.faults.latency_proxy import LatencyProxy, delayed
from tests.faults.shared_state import live_leases, redis_gateway, tenant_leases
from tests.fixtures.gateway import admin_endpoints, eventually, one_engine_config, tenants_with

pytestmark = [pytest.mark.integration, pytest.mark.redis, pytest.mark.slow]
REDIS_TIMEOUT_S = 0.1


def shared_state(base_url: str) -> str:
    return str(httpx.get(base_url + "/readyz").json()["shared_state"])


def samples(base_url: str) -> int:
    return int(admin_endpoints(base_url)["e1"]["estimate"]["samples"])


def test_slow_redis_fails_no_request_and_shared_state_is_rebuilt(
    redis_url: str, key_prefix: str
) -> None:
    target = urlsplit(redis_url)
    proxy = LatencyProxy(target.hostname or "127.0.0.1", target.port or 6379)
    # Tenant limits put a Redis round trip on every request's path.
    limits = {"requests_per_min": 100000, "max_concurrent": 50}
    with (
        one_engine_config(
            endpoint_id="e1",
            state={"redis_timeout_s": REDIS_TIMEOUT_S, "refresh_s": 0.05},
            tenants=tenants_with(acme={"limits": limits}),
        ) as data,
        proxy,
    ):
        with redis_gateway(data, proxy.url, key_prefix) as gateway, Load(gateway) as load:
            assert eventually(lambda: len(load.results) >= 10, 15)
            assert shared_state(gateway) == "up"
            with delayed(proxy, 5 * REDIS_TIMEOUT_S):
                assert eventually(lambda: shared_state(gateway) == "degraded_to_local", 5)
                during = len(load.results)
                assert eventually(lambda: len(load.results) >= during + 10, 15)
            assert eventually(lambda: shared_state(gateway) == "up", 10)
            time.sleep(0.3)  # a few view refreshes: the view now reads Redis again
            before = samples(gateway)
            recovered = len(load.results)
            assert eventually(lambda: len(load.results) >= recovered + 10, 15)
            assert eventually(lambda: samples(gateway) > before, 5)
        assert eventually(lambda: live_leases(redis_url, key_prefix, ["e1"]) == 0, 5)
        assert tenant_leases(redis_url, key_prefix, "acme") == 0
    assert load.failures() == []
