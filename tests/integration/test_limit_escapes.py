"""Tenant and key limits that clients once escaped, through real gateways over simulated
providers: a repeated x-request-id (concurrency), streams without max_tokens (tokens_per_min)
and concurrent requests against a budget, the last over two replicas sharing Redis."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from openai import AsyncOpenAI, RateLimitError

from gateway.config.settings import Settings
from gateway.state.keys import KeySpace
from tests.fixtures.gateway import (
    ADMIN_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    admin_endpoints,
    eventually,
    fleet_config,
    fleet_gateway,
    member,
    provider,
    running_gateway,
    tenants_with,
    usage_view,
)
from tests.fixtures.processes import two_replicas

pytestmark = pytest.mark.integration
# Over Redis: long enough that no call times out on a loaded test machine (a timed-out call is
# served from the replica's own memory, which has no other replica's leases or holds).
STATE = {"redis_timeout_s": 2.0}


def sdk(base_url: str, key: str = TENANT_KEY) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0)


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
    completion: int = usage[0].completion_tokens
    return completion


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
        fleet_config({"p1": slow}, tenants=tenants, state=STATE) as (data, _),
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
        # the admin view reads the shared leases at its next refresh, so it may trail them
        assert eventually(lambda: admin_endpoints(gateway.base_url)["p1"]["in_flight"] == 0)
        again = asyncio.run(at_once([gateway.base_url], 3, **same))
        assert all(r is not None for r in again)


def test_concurrent_streams_without_max_tokens_stay_within_tokens_per_min() -> None:
    """Without max_tokens a request reserves its class's expected output, not its prompt
    alone: 30 concurrent streams of 150 tokens against 3,000 tokens a minute."""
    writer = provider(default_max_tokens=150, ttft_sigma=0.0, tpot_median_s=0.005)
    tenants = tenants_with(acme={"limits": {"tokens_per_min": 3000}})
    with fleet_gateway({"p1": writer}, tenants=tenants) as (gateway, _):
        results = asyncio.run(at_once([gateway.base_url], 30))
    served = [r for r in results if r is not None]
    prompt_tokens = 5  # "Tell me a long story", as the provider counts it
    assert sum(prompt_tokens + r for r in served) <= 3000
    assert served  # some were served


@pytest.mark.parametrize("limited", ["tenant", "key"])
def test_a_running_stream_spends_the_window_before_it_ends(limited: str) -> None:
    """Its tokens are charged as they stream (at most CHARGE_EVERY_S late): once they pass
    the limit, a new request is refused while it still runs (it reserved its prompt and 256
    tokens; it writes 1000). The limit is the tenant's, or that of a key made through the
    admin API for a tenant without one."""
    writer = provider(default_max_tokens=1000, ttft_sigma=0.0, tpot_median_s=0.005)
    limit = {"limits": {"tokens_per_min": 300}}
    sections = {"tenants": tenants_with(acme=limit)} if limited == "tenant" else {}

    async def scenario(base_url: str) -> tuple[int, int | None, int | None]:
        """(tokens the long stream wrote, when a late request was asked (tokens received by
        then), what the late request got: None when refused)."""
        key = TENANT_KEY
        if limited == "key":
            admin = {"authorization": f"Bearer {ADMIN_KEY}"}
            async with httpx.AsyncClient(headers=admin) as http:
                made = await http.post(base_url + "/admin/keys", json={"tenant": "acme", **limit})
            key = made.json()["key"]
        client = sdk(base_url, key)
        try:
            stream = await client.chat.completions.create(
                model=PUBLIC_MODEL,
                messages=[{"role": "user", "content": "Tell me a long story"}],
                stream=True,
            )
            received, asked_at, late, passed_s = 0, None, None, None
            async for chunk in stream:
                received += bool(chunk.choices and chunk.choices[0].delta.content)
                if received >= 350 and passed_s is None:  # past the limit: charged within 1 s
                    passed_s = time.monotonic()
                if asked_at is None and passed_s and time.monotonic() > passed_s + 1.5:
                    asked_at, late = received, await streamed(client, max_tokens=1)
            return received, asked_at, late
        finally:
            await client.close()

    with fleet_gateway({"p1": writer}, **sections) as (gateway, _):
        written, asked_at, late = asyncio.run(scenario(gateway.base_url))
    assert written == 1000
    assert asked_at is not None and asked_at < 1000  # asked while the stream ran
    assert late is None  # and refused


@pytest.mark.redis
def test_a_budget_holds_under_concurrency_across_replicas(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """A day budget of six requests' cost, 30 concurrent clients over two replicas: the
    predicted cost is held at admission, so six are served and the spend stays in budget."""
    price = {"input_per_1m": 0.0, "output_per_1m": 5.0}  # 100 tokens: $0.0005
    budget = {"usd_per_day": 0.003}
    slow = provider(ttft_sigma=0.0, tpot_median_s=0.02, tpot_sigma=0.0)
    with (
        fleet_config(
            {"p1": member(slow, price=price)},
            tenants=tenants_with(acme={"budget": budget}),
            state=STATE,
        ) as (data, _),
        two_replicas(data, tmp_path, redis_url, key_prefix) as (a, b),
    ):
        started = time.monotonic()
        results = asyncio.run(at_once([a.base_url, b.base_url], 30, max_tokens=100))
        assert time.monotonic() - started < 30  # one wave: the refused are not retried
        assert eventually(lambda: usage_view(a.base_url).get("acme", {}).get("requests") == 6)
        spent_pusd = usage_view(a.base_url)["acme"]["cost_pusd"]
    assert sum(r is not None for r in results) == 6
    assert spent_pusd <= 0.003 * 1e12
