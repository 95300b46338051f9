"""Identical endpoints share the load under slo_aware with several workers: four identical
simulated engines behind `serve --workers 2`, one prompt sent over and over (what a benchmark
sends), and each engine served within 1.15x of the mean. The engines leave cached tokens out of
their usage, as vLLM does by default, so the prefix index never learns that a prediction was
wrong."""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    TENANT_KEY,
    engine,
    eventually,
    fleet_config,
    sim_stats,
)
from tests.fixtures.processes import GatewayProcess, answering_pids, worker_pids

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REQUESTS, CONCURRENCY = 400, 32
PROMPT: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Say hello. Say hello. Say hello."}
]


async def send_all(base_url: str) -> None:
    """REQUESTS short answers to one prompt, CONCURRENCY at a time, each must be served."""
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=TENANT_KEY, max_retries=0)
    turns = iter(range(REQUESTS))

    async def one_connection() -> None:
        for _ in turns:
            await client.chat.completions.create(model=PUBLIC_MODEL, messages=PROMPT, max_tokens=4)

    async with client:
        await asyncio.gather(*(one_connection() for _ in range(CONCURRENCY)))


def test_four_identical_engines_share_the_load_within_15_percent(tmp_path: Path) -> None:
    fleet = {f"e{i}": engine(seed=i, enable_prompt_tokens_details=False) for i in range(4)}
    with (
        fleet_config(fleet, policy={"name": "slo_aware"}) as (data, urls),
        GatewayProcess(data, tmp_path, GATEWAY_REDIS_URL="", GATEWAY_WORKERS="2") as gateway,
    ):
        assert eventually(lambda: answering_pids(gateway.base_url) == worker_pids(gateway))
        asyncio.run(send_all(gateway.base_url))
        served = [sim_stats(url)["requests_received"] for url in urls.values()]
    assert sum(served) == REQUESTS
    assert max(served) / statistics.mean(served) <= 1.15, served
