"""Fault matrix 5 and 8: a gateway replica killed mid-load, and a graceful shutdown (SIGTERM)."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.faults.clients import Load, Stream
from tests.faults.shared_state import live_leases
from tests.fixtures.gateway import admin_endpoints, engine, eventually, fleet_config
from tests.fixtures.processes import GatewayProcess

pytestmark = [pytest.mark.integration, pytest.mark.redis, pytest.mark.slow]
LEASE_TTL_S = 2.0


def in_flight(base_url: str) -> dict[str, int]:
    return {eid: int(view["in_flight"]) for eid, view in admin_endpoints(base_url).items()}


def test_killed_replica_leases_expire_within_the_ttl_and_do_not_skew_the_survivor(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    env = {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_REDIS_PREFIX": key_prefix}
    server = {"lease_ttl_s": LEASE_TTL_S, "admin_key_env": "TEST_ADMIN_KEY"}
    shared = {"server": server, "state": {"refresh_s": 0.05}, "policy": {"name": "least_loaded"}}
    with fleet_config({"e1": engine(), "e2": engine()}, **shared) as (both, _):
        # The victim serves e1 only, so its leases pile up on one endpoint of the survivor's two.
        victim_data = both | {"endpoints": both["endpoints"][:1]}
        with (
            GatewayProcess(victim_data, tmp_path, **env) as victim,
            GatewayProcess(both, tmp_path, **env) as survivor,
        ):
            streams = [Stream(victim.base_url) for _ in range(6)]
            assert all(s.started.wait(10) for s in streams)
            assert eventually(lambda: in_flight(survivor.base_url)["e1"] == 6, 5)
            assert victim.process is not None
            victim.process.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            assert eventually(lambda: in_flight(survivor.base_url)["e1"] == 0, LEASE_TTL_S + 3)
            expired_after_s = time.monotonic() - killed_at
            with Load(survivor.base_url, threads=4, max_tokens=16) as load:
                assert eventually(lambda: len(load.results) >= 20, 20)
            for stream in streams:
                stream.close()
        assert eventually(lambda: live_leases(redis_url, key_prefix, ["e1", "e2"]) == 0, 5)
    assert expired_after_s <= LEASE_TTL_S + 1.0
    assert load.failures() == []
    shares = Counter(r.endpoint for r in load.results)
    # Phantom leases on e1 would send the survivor's least-loaded routing all to e2.
    assert min(shares["e1"], shares["e2"]) >= len(load.results) // 5, shares


def refuses_connections(base_url: str) -> bool:
    try:
        httpx.get(base_url + "/healthz", timeout=0.5)
    except httpx.ConnectError:
        return True
    except httpx.HTTPError:
        return False
    return False


DRAIN_TIMEOUT_S = 3


def test_sigterm_stops_accepting_drains_streams_and_releases_leases(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    env = {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_REDIS_PREFIX": key_prefix}
    server = {"drain_timeout_s": DRAIN_TIMEOUT_S, "admin_key_env": "TEST_ADMIN_KEY"}
    with (
        fleet_config({"e1": engine()}, server=server) as (data, _),
        GatewayProcess(data, tmp_path, **env) as gateway,
    ):
        short = Stream(gateway.base_url, max_tokens=100)  # about 1.5 s of tokens
        long = Stream(gateway.base_url, max_tokens=2000)  # about 30 s: outlives the drain
        assert short.started.wait(10) and long.started.wait(10)
        assert gateway.process is not None
        gateway.process.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        assert eventually(lambda: refuses_connections(gateway.base_url), 2)
        assert short.ended.wait(10) and long.ended.wait(DRAIN_TIMEOUT_S + 5)
        cut_after_s = time.monotonic() - stopped_at
        code = gateway.process.wait(10)
        exited_after_s = time.monotonic() - stopped_at
        leases = live_leases(redis_url, key_prefix, ["e1"])
    assert short.completed, short.text[-200:]
    assert not long.completed
    assert DRAIN_TIMEOUT_S - 0.5 <= cut_after_s <= DRAIN_TIMEOUT_S + 3
    assert exited_after_s <= DRAIN_TIMEOUT_S + 5
    assert code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has drained
    assert leases == 0
