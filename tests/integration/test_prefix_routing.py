"""Prefix-aware routing through real servers: the gateway under uvicorn in front of simulated
engines with prefix caching, the openai SDK as the client."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import openai
import pytest

from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    TENANT_KEY,
    admin_endpoints,
    engine,
    eventually,
    fleet_gateway,
)
from tests.integration.test_slo_routing import flood

pytestmark = pytest.mark.integration
SLO_AWARE = {"name": "slo_aware", "explore_fraction": 0.0, "estimate": {"min_samples": 5}}
SLOW_PREFILL = {"prefill_per_token_s": 0.0004, "prefill_quadratic_s": 0.0}
SYSTEM = {"role": "system", "content": "You answer in the house style, briefly. " * 120}


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key=TENANT_KEY, max_retries=0)


def turn(sdk: openai.OpenAI, messages: list[dict[str, Any]]) -> tuple[str, int, int, str]:
    """(endpoint, cached tokens reported, predicted cached tokens, answer) for one turn."""
    raw = sdk.chat.completions.with_raw_response.create(
        model=PUBLIC_MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=24,
    )
    answer = raw.parse()
    usage = answer.usage
    details = usage.prompt_tokens_details if usage is not None else None
    cached = (details.cached_tokens or 0) if details is not None else 0
    predicted = int(raw.headers["x-slo-gateway-predicted-cached-tokens"])
    text = answer.choices[0].message.content or ""
    return raw.headers["x-slo-gateway-endpoint"], cached, predicted, text


def conversation(sdk: openai.OpenAI, name: str, turns: int) -> list[tuple[str, int, int]]:
    messages: list[dict[str, Any]] = [SYSTEM]
    seen = []
    for number in range(turns):
        messages.append({"role": "user", "content": f"{name} asks question {number}. " * 30})
        endpoint_id, cached, predicted, text = turn(sdk, messages)
        messages.append({"role": "assistant", "content": text})
        seen.append((endpoint_id, cached, predicted))
    return seen


def warm_up(sdk: openai.OpenAI, count: int = 12) -> None:
    for number in range(count):
        sdk.chat.completions.create(
            model=PUBLIC_MODEL,
            messages=[{"role": "user", "content": f"warm-up {number} " * (20 + 40 * (number % 3))}],
            max_tokens=4,
        )


def test_turns_of_a_session_land_where_their_prefix_is() -> None:
    members = {"one": engine(**SLOW_PREFILL), "two": engine(**SLOW_PREFILL)}
    with fleet_gateway(members, policy=SLO_AWARE) as (gateway, _):
        sdk = client(gateway.base_url)
        warm_up(sdk)
        seen = conversation(sdk, "alice", turns=6)
    home = seen[1][0]
    assert sum(endpoint_id == home for endpoint_id, _, _ in seen[1:]) >= 4, seen
    later = seen[2:]
    assert all(cached > 0 for _, cached, _ in later), seen  # the engine held the conversation
    assert all(predicted > 0 for _, _, predicted in later), seen  # and the index knew it
    for endpoint_id, cached, predicted in later:
        if endpoint_id == home:
            assert abs(predicted - cached) <= 0.3 * cached + 64, seen


def test_a_session_spills_when_its_holders_queue_makes_another_faster() -> None:
    members = {"busy": engine(max_num_seqs=2), "idle": engine()}
    with fleet_gateway(members, policy=SLO_AWARE) as (gateway, urls):
        sdk = client(gateway.base_url)
        warm_up(sdk)
        messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "hello"}]
        homes = collections.Counter(turn(sdk, messages)[0] for _ in range(4))
        flood(urls["busy"], count=12, max_tokens=300)

        def queue_seen() -> bool:
            signals = admin_endpoints(gateway.base_url)["busy"]["engine"]
            return bool(signals and (signals["waiting"] or 0) >= 5)

        assert eventually(queue_seen)
        chosen = [turn(sdk, messages)[0] for _ in range(6)]
    assert homes  # the prefix was placed somewhere before the flood
    assert chosen.count("idle") >= 5, chosen  # a hit is worth its seconds, no more


async def closed_loop(
    base_url: str, connections: int, per_connection: int, shared: bool
) -> list[str]:
    sdk = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=TENANT_KEY, max_retries=0)
    chosen: list[str] = []

    async def user(number: int) -> None:
        for request in range(per_connection):
            content = f"user {number} request {request} " * 20
            messages = (  # the shared one: every user's system prompt
                [SYSTEM, {"role": "user", "content": content}]
                if shared
                else [{"role": "user", "content": content}]
            )
            raw = await sdk.chat.completions.with_raw_response.create(
                model=PUBLIC_MODEL,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=16,
            )
            chosen.append(raw.headers["x-slo-gateway-endpoint"])

    await asyncio.gather(*(user(n) for n in range(connections)))
    await sdk.close()
    return chosen


@pytest.mark.parametrize("shared", [False, True], ids=["unique prompts", "one hot system prompt"])
def test_identical_endpoints_share_closed_loop_load(shared: bool) -> None:
    """64 connections on two identical engines: without prefixes they split about evenly
    (16/84 before bands); one very popular system prompt does not pin them to one replica."""
    classes = {  # room for 64 at once
        "interactive": {"ttft_ms": 5000, "priority": 10},
        "batch": {"deadline_ms": 60000, "sheddable": True},
    }
    members = {"one": engine(), "two": engine()}
    with fleet_gateway(members, policy=SLO_AWARE, classes=classes) as (gateway, _):
        warm_up(client(gateway.base_url))
        chosen = asyncio.run(closed_loop(gateway.base_url, 64, 4, shared))
    counts = collections.Counter(chosen)
    assert min(counts["one"], counts["two"]) >= 0.3 * len(chosen), counts
