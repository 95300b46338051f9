"""Exact across replicas: two gateway processes sharing one Redis, N tenants x M concurrent
requests through the official openai SDK (whole and streamed, with and without max_tokens).
Each tenant's tokens window ends up holding exactly the sum of the usage its clients were
told, and /admin/usage the same sums, with the cost at the endpoint's prices."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from openai import AsyncOpenAI

from gateway.config.settings import Price
from gateway.core.accounting import cost_pusd
from gateway.state.keys import KeySpace
from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    config,
    endpoint,
    engine,
    fleet_member,
    usage_view,
)
from tests.fixtures.processes import two_replicas

pytestmark = [pytest.mark.integration, pytest.mark.redis]
TENANTS = [f"t{i}" for i in range(3)]
PER_TENANT = 8
PRICE = {"input_per_1m": 0.25, "output_per_1m": 2.0}


def tenants_config(engine_url: str) -> dict[str, Any]:
    data = config([endpoint("e1", engine_url, price=PRICE)])
    for tenant in TENANTS:
        os.environ[f"TEST_KEY_{tenant.upper()}"] = f"sk-test-{tenant}"
        data["tenants"][tenant] = {
            "api_key_env": f"TEST_KEY_{tenant.upper()}",
            "allowed_classes": ["interactive"],
            "default_class": "interactive",
            "limits": {"tokens_per_min": 1_000_000, "requests_per_min": 10_000},
        }
    return data


async def one(sdk: AsyncOpenAI, n: int) -> tuple[int, int]:
    """(prompt, completion) tokens as the SDK reports them."""
    messages: Any = [{"role": "user", "content": f"Request {n}: " + "tell me more " * n}]
    extra: dict[str, Any] = {} if n % 3 == 0 else {"max_tokens": 8 + 5 * n}
    if n % 2:
        stream = await sdk.chat.completions.create(
            model=PUBLIC_MODEL,
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            **extra,
        )
        found = [chunk.usage async for chunk in stream if chunk.usage is not None]
        assert len(found) == 1
        usage = found[0]
    else:
        answer = await sdk.chat.completions.create(model=PUBLIC_MODEL, messages=messages, **extra)
        assert answer.usage is not None
        usage = answer.usage
    return usage.prompt_tokens, usage.completion_tokens


async def load(urls: list[str]) -> dict[str, list[tuple[int, int]]]:
    clients = {
        (tenant, i): AsyncOpenAI(
            base_url=urls[i % 2] + "/v1", api_key=f"sk-test-{tenant}", max_retries=0
        )
        for tenant in TENANTS
        for i in range(2)
    }
    jobs = [one(clients[tenant, n % 2], n) for tenant in TENANTS for n in range(PER_TENANT)]
    results = await asyncio.gather(*jobs)
    for sdk in clients.values():
        await sdk.close()
    return {
        tenant: list(results[i * PER_TENANT : (i + 1) * PER_TENANT])
        for i, tenant in enumerate(TENANTS)
    }


def window_total(redis_url: str, prefix: str, tenant: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        slots = client.hvals(KeySpace(prefix).tenant(tenant, "tokens"))
        return sum(int(value) for value in slots)
    finally:
        client.close()


def test_windows_and_usage_equal_the_clients_usage_exactly(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    with fleet_member(engine()) as engine_url:
        data = tenants_config(engine_url)
        with two_replicas(data, tmp_path, redis_url, key_prefix) as (a, b):
            reported = asyncio.run(load([a.base_url, b.base_url]))
            expected = {t: sum(p + c for p, c in usages) for t, usages in reported.items()}
            deadline = time.monotonic() + 10  # the write-behind lands within milliseconds
            while time.monotonic() < deadline and any(
                window_total(redis_url, key_prefix, t) != expected[t] for t in TENANTS
            ):
                time.sleep(0.05)
            windows = {t: window_total(redis_url, key_prefix, t) for t in TENANTS}
            views = [usage_view(a.base_url), usage_view(b.base_url)]
    assert windows == expected
    price = Price(**PRICE)
    for view in views:  # both replicas read the same shared buckets
        for tenant, usages in reported.items():
            group = view[tenant]
            assert group["requests"] == PER_TENANT
            assert group["prompt_tokens"] == sum(p for p, _ in usages)
            assert group["completion_tokens"] == sum(c for _, c in usages)
            assert group["cost_pusd"] == sum(cost_pusd(price, p, 0, c) for p, c in usages)
