"""Tenant limits that clients once escaped, through real gateways over simulated providers:
a repeated x-request-id (concurrency)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from openai import AsyncOpenAI, RateLimitError

from gateway.config.settings import Settings
from gateway.state.keys import KeySpace
from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    TENANT_KEY,
    admin_endpoints,
    eventually,
    fleet_config,
    provider,
    running_gateway,
    tenants_with,
)

pytestmark = pytest.mark.integration


def sdk(base_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base_url + "/v1", api_key=TENANT_KEY, max_retries=0)


async def streamed(client: AsyncOpenAI, **extra: Any) -> int | None:
    """Completion tokens of one stream, or None when the tenant's limits refused it."""
    try:
        stream = await client.chat.completions.create(
            model=PUBLIC_MODEL,
            messages=[{"role": "user", "content": "Tell me a long story"}],
            stream=True,
            stream_options={"include_usage": True},
            **extra,
        )
    except RateLimitError:
        return None
    usage = [chunk.usage async for chunk in stream if chunk.usage is not None]
    return usage[0].completion_tokens


async def at_once(base_urls: list[str], count: int, **extra: Any) -> list[int | None]:
    clients = [sdk(url) for url in base_urls]
    try:
        jobs = (streamed(clients[i % len(clients)], **extra) for i in range(count))
        return list(await asyncio.gather(*jobs))
    finally:
        for client in clients:
            await client.close()


@pytest.mark.redis
def test_a_repeated_request_id_shares_no_concurrency_slot_and_leaks_no_lease(
    redis_url: str, key_prefix: str
) -> None:
    """25 concurrent streams with one x-request-id against max_concurrent 3: 3 admitted,
    and every lease (tenant's and endpoint's) back to none once they end."""
    slow = provider(ttft_sigma=0.0, tpot_median_s=0.02, tpot_sigma=0.0)
    tenants = tenants_with(acme={"limits": {"max_concurrent": 3}})
    settings = Settings(redis_url=redis_url, redis_prefix=key_prefix)
    with (
        fleet_config({"p1": slow}, tenants=tenants) as (data, _),
        running_gateway(data, settings=settings) as gateway,
    ):
        same = {"extra_headers": {"x-request-id": "same-id"}, "max_tokens": 40}
        results = asyncio.run(at_once([gateway.base_url], 25, **same))
        assert sum(r is not None for r in results) == 3
        keys = KeySpace(key_prefix)
        client = redis.Redis.from_url(redis_url)
        try:
            assert eventually(
                lambda: (
                    client.zcard(keys.leases("p1")) == 0
                    and client.zcard(keys.tenant("acme", "concurrency")) == 0
                )
            )
        finally:
            client.close()
        assert admin_endpoints(gateway.base_url)["p1"]["in_flight"] == 0
        again = asyncio.run(at_once([gateway.base_url], 3, **same))
        assert all(r is not None for r in again)
