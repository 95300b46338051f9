"""Failover before the first byte, a clean error after it, and cancellation on disconnect."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    TENANT_KEY,
    chat_body,
    dead_upstream,
    engine,
    eventually,
    fleet_gateway,
    gateway_over,
    member,
    provider,
    sim_stats,
)
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration
AUTH = {"authorization": f"Bearer {TENANT_KEY}"}


def post_chat(base_url: str, **extra: Any) -> httpx.Response:
    return httpx.post(
        base_url + "/v1/chat/completions",
        json=chat_body(**({"max_tokens": 4} | extra)),
        headers=AUTH,
        timeout=30,
    )


def test_fails_over_when_an_endpoint_refuses_connections() -> None:
    with fleet_gateway({"a-dead": dead_upstream(), "b-good": engine()}) as (gateway, _):
        responses = [post_chat(gateway.base_url) for _ in range(4)]
    assert [r.status_code for r in responses] == [200] * 4
    assert {r.headers["x-slo-gateway-endpoint"] for r in responses} == {"b-good"}
    assert responses[0].headers["x-slo-gateway-attempts"] == "2"


def test_fails_over_on_503_and_counts_the_attempt() -> None:
    broken = engine(faults={"status_code": 503})
    with fleet_gateway({"a-broken": broken, "b-good": engine()}) as (gateway, _):
        response = post_chat(gateway.base_url, stream=True)
        metrics = httpx.get(gateway.base_url + "/metrics").text
    assert response.status_code == 200
    assert response.headers["x-slo-gateway-endpoint"] == "b-good"
    assert "data: [DONE]" in response.text
    assert 'slo_gateway_upstream_attempts_total{endpoint="a-broken",result="failed"} 1.0' in metrics


def test_fails_over_when_an_endpoint_hangs_past_the_first_byte_timeout() -> None:
    members = {"a-hung": engine(faults={"hang": True}), "b-good": engine()}
    with fleet_gateway(members, server={"first_byte_timeout_s": 0.5}) as (gateway, _):
        started = time.perf_counter()
        response = post_chat(gateway.base_url, stream=True)
        elapsed = time.perf_counter() - started
    assert response.status_code == 200
    assert response.headers["x-slo-gateway-endpoint"] == "b-good"
    assert 0.5 <= elapsed < 10


def test_provider_429_fails_over_to_the_next_endpoint() -> None:
    limited = provider(faults={"status_code": 429})
    with fleet_gateway({"a-limited": limited, "b-good": engine()}) as (gateway, _):
        response = post_chat(gateway.base_url)
        ready = httpx.get(gateway.base_url + "/readyz").json()
    assert response.status_code == 200
    assert response.headers["x-slo-gateway-endpoint"] == "b-good"
    assert ready["endpoints"]["b-good"] == "available"


def test_every_endpoint_failing_gives_an_openai_502() -> None:
    with fleet_gateway({"a": dead_upstream(), "b": dead_upstream()}) as (gateway, _):
        response = post_chat(gateway.base_url)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_failed"
    assert "127.0.0.1" not in response.text  # no upstream addresses in client errors


def test_mid_stream_drop_ends_with_an_sse_error_event() -> None:
    faults = {"drop_mid_stream": 1.0, "drop_after_tokens": 3}
    with gateway_over(engine(faults=faults)) as (gateway_url, _):
        raw = post_chat(gateway_url, stream=True, max_tokens=20)
        client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=TENANT_KEY, max_retries=0)
        with pytest.raises(openai.APIError, match=r"mid-stream|early"):
            for _ in client.chat.completions.create(
                model=PUBLIC_MODEL,
                messages=[{"role": "user", "content": "x"}],
                max_tokens=20,
                stream=True,
            ):
                pass
    assert raw.status_code == 200
    events = [e for e in raw.text.split("\n\n") if e.startswith("data:")]
    assert '"content"' in events[0]
    assert '"error"' in events[-1] and "[DONE]" not in raw.text


def in_flight_gauge(base_url: str) -> float:
    for line in httpx.get(base_url + "/metrics").text.splitlines():
        if line.startswith("slo_gateway_in_flight{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_client_disconnect_mid_stream_cancels_upstream() -> None:
    with gateway_over(engine()) as (gateway_url, engine_url):
        with httpx.stream(
            "POST",
            gateway_url + "/v1/chat/completions",
            json=chat_body(max_tokens=2000, stream=True),
            headers=AUTH,
        ) as response:
            first = next(response.iter_bytes())
            assert b"data:" in first
        assert eventually(lambda: sim_stats(engine_url)["cancelled"] == 1)
        assert eventually(lambda: sim_stats(engine_url)["in_progress"] == 0)
        assert eventually(lambda: in_flight_gauge(gateway_url) == 0)


def test_client_disconnect_before_first_byte_cancels_upstream() -> None:
    with gateway_over(engine(faults={"slowdown": 200.0})) as (gateway_url, slow):
        with pytest.raises(httpx.ReadTimeout):
            post_chat_with_timeout(gateway_url, 0.5)
        assert eventually(lambda: sim_stats(slow)["cancelled"] == 1)
        assert eventually(lambda: in_flight_gauge(gateway_url) == 0)


def post_chat_with_timeout(base_url: str, timeout_s: float) -> httpx.Response:
    return httpx.post(
        base_url + "/v1/chat/completions",
        json=chat_body(max_tokens=4, stream=True),
        headers=AUTH,
        timeout=timeout_s,
    )


def test_a_long_retry_after_is_passed_on_instead_of_waited_for() -> None:
    """A lone provider asking for 30 s: no pointless retries; the client gets 429 with that
    Retry-After, then 503 with the time left while the endpoint cools down."""
    calls: list[int] = []

    async def limited(request: Request) -> JSONResponse:
        calls.append(1)
        body = {"error": {"message": "slow down", "type": "rate_limit_error", "code": None}}
        return JSONResponse(body, status_code=429, headers={"retry-after": "30"})

    app = Starlette(routes=[Route("/v1/chat/completions", limited, methods=["POST"])])
    with (
        UvicornThread(app) as upstream,
        fleet_gateway({"hosted": member(upstream.base_url, "openai")}) as (gateway, _),
    ):
        started = time.perf_counter()
        first = post_chat(gateway.base_url)
        elapsed_s = time.perf_counter() - started
        second = post_chat(gateway.base_url)
    assert first.status_code == 429 and elapsed_s < 3
    assert first.headers["x-slo-gateway-reason"] == "upstream_rate_limited"
    assert 25 <= int(first.headers["retry-after"]) <= 30
    assert second.status_code == 503
    assert 25 <= int(second.headers["retry-after"]) <= 30
    assert len(calls) == 1
