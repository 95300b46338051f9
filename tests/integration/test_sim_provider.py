"""The simulated hosted provider on a real uvicorn socket: auth, rate limits, faults."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.sim.provider import ProviderParams, create_provider_app
from tests.fixtures.servers import serve_app

pytestmark = pytest.mark.integration

KEY = "sk-test"
MODEL = "llama3-8b-hosted"
FAST = {"ttft_median_s": 0.02, "ttft_sigma": 0.0, "tpot_median_s": 0.005, "tpot_sigma": 0.0}


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]} | extra


@pytest.fixture
async def provider() -> AsyncIterator[httpx.AsyncClient]:
    params = ProviderParams.model_validate(FAST | {"api_key": KEY, "max_concurrency": 2, "seed": 3})
    async with serve_app(create_provider_app(params)) as base_url:
        headers = {"authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=10) as client:
            yield client


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", KEY])
async def test_requires_the_bearer_key(
    provider: httpx.AsyncClient, authorization: str | None
) -> None:
    headers = {"authorization": authorization} if authorization else {}
    async with httpx.AsyncClient(base_url=str(provider.base_url), headers=headers) as bare:
        response = await bare.post("/v1/chat/completions", json=chat())
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


async def test_success_carries_rate_limit_headers(provider: httpx.AsyncClient) -> None:
    response = await provider.post("/v1/chat/completions", json=chat(max_tokens=3))
    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == 3
    assert response.headers["x-ratelimit-limit-requests"] == "2"
    assert response.headers["x-ratelimit-remaining-requests"] == "1"
    assert response.headers["x-ratelimit-reset-requests"] == "1s"
    assert (await provider.get("/sim/stats")).json()["authorization_present"] is True


async def test_concurrency_limit_answers_429_with_retry_headers(
    provider: httpx.AsyncClient,
) -> None:
    body = chat(max_tokens=200, stream=True)
    async with (
        provider.stream("POST", "/v1/chat/completions", json=body) as first,
        provider.stream("POST", "/v1/chat/completions", json=body) as second,
    ):
        assert (first.status_code, second.status_code) == (200, 200)
        assert second.headers["x-ratelimit-remaining-requests"] == "0"
        third = await provider.post("/v1/chat/completions", json=chat())
    assert third.status_code == 429
    assert third.json()["error"]["code"] == "rate_limit_exceeded"
    assert third.headers["retry-after"] == "1"
    assert third.headers["x-ratelimit-remaining-requests"] == "0"
    assert third.headers["x-ratelimit-reset-requests"] == "1s"
    assert (await provider.get("/sim/stats")).json()["rate_limited"] == 1


async def test_stream_has_openai_shape_with_separate_finish(provider: httpx.AsyncClient) -> None:
    body = chat(max_tokens=4, stream=True, stream_options={"include_usage": True})
    response = await provider.post("/v1/chat/completions", json=body)
    parts = response.text.split("\n\n")[:-1]
    assert parts[-1] == "data: [DONE]"
    chunks = [json.loads(p[len("data: ") :]) for p in parts[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "The"}
    assert chunks[-2]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "length",
    }
    assert chunks[-1]["usage"]["completion_tokens"] == 4


async def test_insufficient_quota_is_a_non_retryable_429(provider: httpx.AsyncClient) -> None:
    await provider.post("/sim/faults", json={"insufficient_quota": True})
    response = await provider.post("/v1/chat/completions", json=chat())
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "insufficient_quota"
    assert "retry-after" not in response.headers


async def test_drop_fault_breaks_the_stream(provider: httpx.AsyncClient) -> None:
    await provider.post("/sim/faults", json={"drop_mid_stream": 1.0, "drop_after_tokens": 1})
    with pytest.raises(httpx.RemoteProtocolError):
        await provider.post("/v1/chat/completions", json=chat(max_tokens=10, stream=True))


async def test_ttft_follows_the_configured_median() -> None:
    params = ProviderParams(api_key=KEY, ttft_median_s=0.2, ttft_sigma=0.0, tpot_sigma=0.0)
    async with serve_app(create_provider_app(params)) as base_url:
        headers = {"authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
            start = time.monotonic()
            body = chat(max_tokens=2, stream=True)
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                await anext(response.aiter_lines())
                ttft_s = time.monotonic() - start
    assert 0.18 <= ttft_s <= 0.6


async def test_slowdown_at_s_applies_only_after_the_delay(provider: httpx.AsyncClient) -> None:
    await provider.post("/sim/faults", json={"slowdown": 20.0, "slowdown_at_s": 0.3})

    async def duration_s() -> float:
        start = time.monotonic()
        await provider.post("/v1/chat/completions", json=chat(max_tokens=2))
        return time.monotonic() - start

    before = await duration_s()
    await asyncio.sleep(0.3)
    assert await duration_s() > 3 * before


async def test_usage_always_carries_cached_tokens_openai_style(
    provider: httpx.AsyncClient,
) -> None:
    def long_chat(tail: str, **extra: Any) -> dict[str, Any]:
        content = "y" * 6000 + tail  # 1,504+ tokens: 11 blocks of 128 tokens and a bit
        return chat(max_tokens=2, **extra) | {"messages": [{"role": "user", "content": content}]}

    async def usage(body: dict[str, Any]) -> dict[str, Any]:
        response = await provider.post("/v1/chat/completions", json=body)
        parts = response.text.split("\n\n")[:-1] if body.get("stream") else []
        answer = json.loads(parts[-2][len("data: ") :]) if parts else response.json()
        return dict(answer["usage"])

    short = await usage(chat(max_tokens=2))
    assert short["prompt_tokens_details"] == {"cached_tokens": 0, "audio_tokens": 0}
    assert (await usage(long_chat("a")))["prompt_tokens_details"]["cached_tokens"] == 0
    assert (await usage(long_chat("b")))["prompt_tokens_details"]["cached_tokens"] == 11 * 128
    streamed = long_chat("c", stream=True, stream_options={"include_usage": True})
    assert (await usage(streamed))["prompt_tokens_details"]["cached_tokens"] == 11 * 128
    assert (await provider.get("/sim/stats")).json()["cached_tokens_total"] == 22 * 128


async def test_prompt_caching_off_reports_zero() -> None:
    params = ProviderParams.model_validate(FAST | {"api_key": KEY, "prompt_caching": False})
    body = chat(max_tokens=1) | {"messages": [{"role": "user", "content": "y" * 6000}]}
    async with serve_app(create_provider_app(params)) as base_url:
        headers = {"authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
            for _ in range(2):
                answer = (await client.post("/v1/chat/completions", json=body)).json()
                assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_a_cached_prefix_shortens_the_first_token() -> None:
    slow_prefill = FAST | {"api_key": KEY, "ttft_per_prompt_token_s": 2e-4}
    params = ProviderParams.model_validate(slow_prefill)
    body = chat(max_tokens=1) | {"messages": [{"role": "user", "content": "y" * 6000}]}
    async with serve_app(create_provider_app(params)) as base_url:
        headers = {"authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
            durations_s = []
            for _ in range(2):
                start = time.monotonic()
                await client.post("/v1/chat/completions", json=body)
                durations_s.append(time.monotonic() - start)
    cold_s, warm_s = durations_s  # prefill 1,504 tokens (0.30 s), then 96 of them (0.02 s)
    assert cold_s > 0.3 and warm_s < cold_s - 0.2
