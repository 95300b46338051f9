"""The Scraper against a real /metrics server on loopback, with a driven clock."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gateway.config.settings import EndpointConfig
from gateway.watch.scraper import Scraper
from policies.base import EngineSignals
from tests.fixtures.loops import ParkingSleep, run_rounds
from tests.fixtures.servers import serve_app

pytestmark = pytest.mark.integration

PAGE = """\
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="0",model_name="m"} 9.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
"""


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class MetricsServer:
    """Serves `text` with `status` on /metrics and /custom; counts requests."""

    def __init__(self) -> None:
        self.text = PAGE
        self.status = 200
        self.hits: list[str] = []
        self.app = Starlette(
            routes=[Route("/metrics", self.metrics), Route("/custom", self.metrics)]
        )

    async def metrics(self, request: Request) -> PlainTextResponse:
        self.hits.append(request.url.path)
        return PlainTextResponse(self.text, status_code=self.status)


def endpoint(eid: str, base_url: str, **extra: Any) -> EndpointConfig:
    return EndpointConfig.model_validate(
        {"id": eid, "base_url": base_url, "models": {"m": "m"}, "kind": "vllm", **extra}
    )


@pytest.fixture
async def metrics() -> AsyncIterator[tuple[MetricsServer, str]]:
    server = MetricsServer()
    async with serve_app(server.app) as url:
        yield server, url


async def test_signals_carry_their_age_and_go_unknown_when_stale(
    metrics: tuple[MetricsServer, str], client: httpx.AsyncClient
) -> None:
    _, url = metrics
    clock = FakeClock()
    scraper = Scraper([endpoint("e1", f"{url}/v1")], client, stale_after_s=2.0, clock=clock)
    assert scraper.signals("e1") is None, "never scraped"
    await scraper.scrape_once()
    clock.now += 1.5
    assert scraper.signals("e1") == EngineSignals(
        waiting=4.0, running=9.0, kv_usage=0.25, age_s=1.5
    )
    clock.now += 1.0
    assert scraper.signals("e1") == EngineSignals(age_s=2.5)


async def test_a_failing_endpoint_keeps_its_last_values_until_stale_and_logs_once(
    metrics: tuple[MetricsServer, str],
    client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, url = metrics
    clock = FakeClock()
    scraper = Scraper([endpoint("e1", f"{url}/v1")], client, clock=clock)
    await scraper.scrape_once()
    server.status = 500
    clock.now += 1.0
    with caplog.at_level(logging.INFO, logger="slo_gateway"):
        for _ in range(3):
            await scraper.scrape_once()
        signals = scraper.signals("e1")
        assert signals is not None and signals.waiting == 4.0 and signals.age_s == 1.0
        server.status = 200
        server.text = PAGE.replace("4.0", "6.0")
        await scraper.scrape_once()
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1
    assert any("recovered" in r.getMessage() for r in caplog.records)
    recovered = scraper.signals("e1")
    assert recovered is not None and recovered.waiting == 6.0 and recovered.age_s == 0.0


async def test_only_engine_endpoints_are_scraped_at_their_metrics_url(
    metrics: tuple[MetricsServer, str], client: httpx.AsyncClient
) -> None:
    server, url = metrics
    provider = EndpointConfig.model_validate(
        {"id": "p1", "kind": "openai", "base_url": f"{url}/v1", "models": {"m": "m"}}
    )
    custom = endpoint("e2", f"{url}/v1", metrics_url=f"{url}/custom")
    scraper = Scraper([provider, custom], client)
    await scraper.scrape_once()
    assert server.hits == ["/custom"]
    assert scraper.signals("p1") is None
    assert set(scraper.all_signals()) == {"e2"}


async def test_run_polls_each_endpoint_once_per_interval(
    metrics: tuple[MetricsServer, str], client: httpx.AsyncClient
) -> None:
    server, url = metrics
    sleep = ParkingSleep(rounds=3)
    scraper = Scraper(
        [endpoint("e1", f"{url}/v1")], client, interval_s=0.25, clock=FakeClock(), sleep=sleep
    )
    await run_rounds(scraper.run(), sleep)
    assert sleep.delays == [0.25, 0.25, 0.25], "no time passed on the fake clock: a full interval"
    assert len(server.hits) == 3
