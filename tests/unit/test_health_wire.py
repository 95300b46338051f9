"""HealthChecker against real servers on loopback: probe targets, keys, the breaker cycle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.config.settings import EndpointConfig
from gateway.state.breaker import BreakerPolicy
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.redis_store import RedisStatsStore
from gateway.watch.health import HealthChecker, probe_url
from tests.fixtures.loops import ParkingSleep, run_rounds
from tests.fixtures.servers import free_port, serve_app

pytestmark = pytest.mark.integration

SECRET = "sk-test-never-log-me"
POLICY = BreakerPolicy(failure_threshold=2, cooldown_s=10.0, trial_timeout_s=3.0)


class Upstream:
    """/health (engine) and /v1/models (provider, bearer key required); records each path."""

    def __init__(self) -> None:
        self.status = 200
        self.hits: list[str] = []
        self.app = Starlette(
            routes=[
                Route("/health", self.answer),
                Route("/v1/models", self.models),
                Route("/ready", self.answer),
            ]
        )

    async def answer(self, request: Request) -> JSONResponse:
        self.hits.append(request.url.path)
        return JSONResponse({}, status_code=self.status)

    async def models(self, request: Request) -> JSONResponse:
        self.hits.append(request.url.path)
        if request.headers.get("authorization") != f"Bearer {SECRET}":
            return JSONResponse({"error": {"message": "bad key"}}, status_code=401)
        return JSONResponse({"data": []}, status_code=self.status)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def endpoint(eid: str, kind: str, url: str, **extra: Any) -> EndpointConfig:
    return EndpointConfig.model_validate(
        {"id": eid, "kind": kind, "base_url": f"{url}/v1", "models": {"m": "m"}, **extra}
    )


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    server = Upstream()
    async with serve_app(server.app) as url:
        yield server, url


def test_probe_targets() -> None:
    url = "http://h:1"
    assert probe_url(endpoint("e", "vllm", url)) == "http://h:1/health"
    assert probe_url(endpoint("p", "openai", url)) == "http://h:1/v1/models"
    assert probe_url(endpoint("c", "openai", url, health_path="/ready")) == "http://h:1/ready"


async def test_probes_engines_and_providers_with_the_providers_key(
    upstream: tuple[Upstream, str],
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, url = upstream
    monkeypatch.setenv("TEST_PROVIDER_KEY", SECRET)
    keyed = endpoint("p1", "openai", url, api_key_env="TEST_PROVIDER_KEY")
    keyless = endpoint("p2", "openai", url)
    checker = HealthChecker(
        [endpoint("e1", "vllm", url), keyed, keyless], MemoryStatsStore(), client, policy=POLICY
    )
    await checker.check_once()
    probes = checker.last_probes
    assert (probes["e1"].ok, probes["p1"].ok) == (True, True)
    assert (probes["p2"].ok, probes["p2"].status) == (False, 401)
    assert sorted(server.hits) == ["/health", "/v1/models", "/v1/models"]


async def test_failing_probes_open_the_breaker_then_one_trial_closes_it(
    upstream: tuple[Upstream, str],
    client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, url = upstream
    store, clock = MemoryStatsStore(), FakeClock()
    checker = HealthChecker(
        [endpoint("e1", "vllm", url)], store, client, policy=POLICY, clock=clock
    )
    server.status = 503
    with caplog.at_level(logging.INFO, logger="slo_gateway"):
        await checker.check_once()
        await checker.check_once()
        assert not (await store.read(["e1"], now=clock.now))["e1"].available(clock.now)
        clock.now += 5
        await checker.check_once()
        assert len(server.hits) == 2, "no probe while open"
        server.status = 200
        clock.now += 5
        await checker.check_once()
    stats = (await store.read(["e1"], now=clock.now))["e1"]
    assert stats.available(clock.now)
    assert len(server.hits) == 3
    phases = [r.getMessage() for r in caplog.records if "circuit breaker" in r.getMessage()]
    assert phases == [
        "circuit breaker of e1: closed -> open",
        "circuit breaker of e1: open -> half_open",
        "circuit breaker of e1: half_open -> closed",
    ]


async def test_a_trial_held_by_another_replica_is_not_duplicated(
    upstream: tuple[Upstream, str], client: httpx.AsyncClient
) -> None:
    server, url = upstream
    store, clock = MemoryStatsStore(), FakeClock()
    replicas = [
        HealthChecker([endpoint("e1", "vllm", url)], store, client, policy=POLICY, clock=clock)
        for _ in range(3)
    ]
    for _ in range(2):
        await replicas[0].record("e1", ok=False, now=clock.now)
    clock.now += 10
    await asyncio.gather(*(r.check_once() for r in replicas))
    assert len(server.hits) == 1


async def test_passive_failures_open_the_breaker_and_the_key_is_never_logged(
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("TEST_PROVIDER_KEY", SECRET)
    dead = endpoint("p1", "openai", "http://127.0.0.1:9", api_key_env="TEST_PROVIDER_KEY")
    store, clock = MemoryStatsStore(), FakeClock()
    checker = HealthChecker([dead], store, client, policy=POLICY, clock=clock, timeout_s=0.5)
    with caplog.at_level(logging.DEBUG, logger="slo_gateway"):
        await checker.check_once()
        state = await checker.record("p1", ok=False, now=clock.now)
    assert checker.last_probes["p1"].status == 0
    assert state.phase(clock.now) == "open"
    assert caplog.records, "something was logged"
    assert all(SECRET not in r.getMessage() for r in caplog.records)


async def test_run_probes_every_interval(
    upstream: tuple[Upstream, str], client: httpx.AsyncClient
) -> None:
    server, url = upstream
    sleep = ParkingSleep(rounds=2)
    checker = HealthChecker(
        [endpoint("e1", "vllm", url)], MemoryStatsStore(), client, interval_s=7.0, sleep=sleep
    )
    await run_rounds(checker.run(), sleep)
    assert sleep.delays == [7.0, 7.0]
    assert server.hits == ["/health", "/health"]


async def test_run_survives_an_unreachable_store_and_logs_once(
    upstream: tuple[Upstream, str],
    client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, url = upstream
    nobody_listens = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    store = RedisStatsStore(nobody_listens, owns_client=True)
    sleep = ParkingSleep(rounds=3)
    checker = HealthChecker([endpoint("e1", "vllm", url)], store, client, sleep=sleep)
    with caplog.at_level(logging.WARNING, logger="slo_gateway"):
        await run_rounds(checker.run(), sleep)
    await store.close()
    assert len(sleep.delays) == 3, "the loop kept going"
    assert server.hits == [], "no probe without the shared breaker state"
    assert len([r for r in caplog.records if "store unavailable" in r.getMessage()]) == 1
