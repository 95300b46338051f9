"""Redis on a request's path, through a proxy that adds a fixed round-trip time: a tenant with
no shared limit waits for no round trip (leases, outcomes and statistics go through the
write-behind and the background refresh), and a tenant with limits waits for exactly one (its
atomic admission). The round trip is long enough (0.3 s) to stand out of a busy host's noise
and short enough that Redis still counts as up."""

from __future__ import annotations

import statistics
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.faults.latency_proxy import LatencyProxy, delayed
from tests.faults.shared_state import redis_gateway
from tests.fixtures.gateway import (
    OTHER_TENANT_KEY,
    TENANT_KEY,
    chat_body,
    one_engine_config,
    tenants_with,
)

pytestmark = [pytest.mark.integration, pytest.mark.redis, pytest.mark.slow]
ONE_WAY_S = 0.15  # a round trip: 0.3 s
REQUESTS = 9


def median_s(gateway: str, key: str, slo_class: str) -> float:
    """The median wall time of REQUESTS short answers, one after another."""
    times = []
    with httpx.Client(timeout=30, headers={"authorization": f"Bearer {key}"}) as client:
        for _ in range(REQUESTS):
            started = time.perf_counter()
            body = chat_body(max_tokens=2) | {"slo_class": slo_class}
            answer = client.post(gateway + "/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def test_only_a_shared_limit_puts_a_redis_round_trip_on_the_path(
    redis_url: str, key_prefix: str
) -> None:
    target = urlsplit(redis_url)
    proxy = LatencyProxy(target.hostname or "127.0.0.1", target.port or 6379)
    limited = tenants_with(acme={"limits": {"requests_per_min": 100000}})  # zeta has none
    with (
        one_engine_config(tenants=limited, state={"redis_timeout_s": 3.0}) as data,
        proxy,
        redis_gateway(data, proxy.url, key_prefix) as gateway,
    ):
        quick = {
            "acme": median_s(gateway, TENANT_KEY, "interactive"),
            "zeta": median_s(gateway, OTHER_TENANT_KEY, "batch"),
        }
        with delayed(proxy, ONE_WAY_S):
            slow = {
                "acme": median_s(gateway, TENANT_KEY, "interactive"),
                "zeta": median_s(gateway, OTHER_TENANT_KEY, "batch"),
            }
    round_trip_s = 2 * ONE_WAY_S
    added = {tenant: slow[tenant] - quick[tenant] for tenant in quick}
    assert added["zeta"] < 0.5 * round_trip_s, (quick, slow)  # none
    assert 0.8 * round_trip_s < added["acme"] < 1.5 * round_trip_s, (quick, slow)  # one
