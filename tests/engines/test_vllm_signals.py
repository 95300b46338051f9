"""What the gateway measures and scrapes of a real vLLM, against vLLM's own /metrics."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from tests.engines.stack import (
    EXACT_LENGTH,
    KV_CACHE_TOKENS,
    engine_view,
    sdk_client,
    stream_chat,
)
from tests.engines.vllm_server import SERVED_NAME, TEST_TIMEOUT_S, VllmServer
from tests.engines.workload import info_labels, prompt, sample_sum
from tests.fixtures.gateway import eventually
from tests.fixtures.servers import UvicornThread

pytestmark = [pytest.mark.engine, pytest.mark.timeout(TEST_TIMEOUT_S)]
TTFT_REQUESTS = 8
TTFT_PROMPT_TOKENS = 1200  # about 0.5 s of prefill here: the gateway's own overhead is ~1 %
FLOOD_REQUESTS = 20  # ServeParams' max_num_seqs is 16
STALE_AFTER_S = 2.0  # the scraper's default: older signals read as unknown
RATE_WINDOW_S = 2.0  # the scraper's default
PREFIX_PROMPT_TOKENS = 1000
PREEMPTING_REQUESTS = 16  # max_num_seqs
PREEMPTING_PROMPT_TOKENS = 440  # 4 blocks of 128 with the chat template: 16 fill the cache
PREEMPTING_OUTPUT_TOKENS = 100  # a fifth block each, which only 12 of them can have


def read_through(stream: openai.Stream[ChatCompletionChunk]) -> None:
    for _chunk in stream:
        pass


def histogram(page: str, name: str) -> tuple[float, float]:
    """(sum, count) of a histogram over all its label sets."""
    return sample_sum(page, name + "_sum"), sample_sum(page, name + "_count")


def histogram_delta(
    read: Callable[[], str], name: str, before: tuple[float, float], count: int
) -> tuple[float, float]:
    """(sum, count) added since `before`, once `count` observations arrived (at most 5 s)."""
    latest = before

    def arrived() -> bool:
        nonlocal latest
        latest = histogram(read(), name)
        return latest[1] - before[1] >= count

    eventually(arrived, 5)
    return latest[0] - before[0], latest[1] - before[1]


@pytest.mark.flaky(reruns=2)
def test_gateway_ttft_agrees_with_vllms_histogram(gateway: UvicornThread, vllm: VllmServer) -> None:
    def gateway_page() -> str:
        return httpx.get(gateway.base_url + "/metrics").text

    engine_name, gateway_name = "vllm:time_to_first_token_seconds", "slo_gateway_ttft_seconds"
    with sdk_client(gateway) as sdk:
        read_through(stream_chat(sdk, prompt(TTFT_PROMPT_TOKENS, seed=100), 2))  # warm-up
        engine_before = histogram(vllm.metrics(), engine_name)
        gateway_before = histogram(gateway_page(), gateway_name)
        for seed in range(101, 101 + TTFT_REQUESTS):  # one at a time: no queueing noise
            read_through(stream_chat(sdk, prompt(TTFT_PROMPT_TOKENS, seed), 4))
    engine_sum, engine_count = histogram_delta(
        vllm.metrics, engine_name, engine_before, TTFT_REQUESTS
    )
    gateway_sum, gateway_count = histogram_delta(
        gateway_page, gateway_name, gateway_before, TTFT_REQUESTS
    )
    assert engine_count == gateway_count == TTFT_REQUESTS
    engine_mean, gateway_mean = engine_sum / engine_count, gateway_sum / gateway_count
    print(f"TTFT mean over {TTFT_REQUESTS}: gateway {gateway_mean:.4f} s, vLLM {engine_mean:.4f} s")
    assert abs(gateway_mean - engine_mean) <= 0.10 * engine_mean


def direct_chat(server: VllmServer, content: str, max_tokens: int) -> int:
    """A chat request straight to vLLM, past the gateway (whose admission would pace it)."""
    body = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
    } | EXACT_LENGTH
    url = server.base_url + "/v1/chat/completions"
    return httpx.post(url, json=body, timeout=120).status_code


@pytest.mark.flaky(reruns=2)
def test_the_gateway_scrapes_vllms_queue_kv_and_capacity_with_their_age(
    gateway: UvicornThread, vllm: VllmServer
) -> None:
    seen: list[dict[str, Any]] = []

    def busy() -> bool:
        seen.append(view := engine_view(gateway.base_url))
        # The queue's reason gauge is mapped (0 or more); whether the four that wait are
        # counted as waiting for capacity at the moment of a scrape depends on the scheduler's
        # step, so the test asks for a queue and a full batch, and that the reason is read.
        counts = ("running", "waiting", "kv_usage")
        mapped = view.get("waiting_for_capacity") is not None
        return mapped and all((view.get(name) or 0) > 0 for name in counts)

    # 20 requests for 16 sequences: 4 wait for capacity while 16 fill most of the KV cache.
    with concurrent.futures.ThreadPoolExecutor(FLOOD_REQUESTS) as pool:
        contents = [prompt(300, seed) for seed in range(200, 200 + FLOOD_REQUESTS)]
        # 240 tokens each keeps the engine busy for seconds: its gauges lag (they are logged per
        # interval, not per step), so a flood that ends sooner can be missed by every scrape.
        statuses = pool.map(lambda content: direct_chat(vllm, content, 240), contents)
        saw_busy = eventually(busy, 30)
        assert list(statuses) == [200] * FLOOD_REQUESTS
    assert saw_busy, seen[-3:]
    assert all(view["age_s"] < STALE_AFTER_S for view in seen)
    capacity = info_labels(vllm.metrics(), "vllm:cache_config_info")["kv_cache_size_tokens"]
    assert seen[-1]["kv_capacity_tokens"] == int(capacity) == KV_CACHE_TOKENS
    assert eventually(lambda: _settled(gateway.base_url, vllm), 5), engine_view(gateway.base_url)


def _settled(gateway_url: str, server: VllmServer) -> bool:
    """The gateway's view has followed the idle engine back down, counters included."""
    view = engine_view(gateway_url)
    preemptions = sample_sum(server.metrics(), "vllm:num_preemptions_total")
    gauges = [view["running"], view["waiting"], view["waiting_for_capacity"], view["kv_usage"]]
    counted = view["preemptions_total"] == preemptions and view["waiting_deferred"] == 0
    return gauges == [0, 0, 0, 0] and counted


def test_the_gateway_view_carries_vllms_prefix_cache_counters_and_their_rates(
    gateway: UvicornThread, vllm: VllmServer
) -> None:
    before = engine_view(gateway.base_url)
    content = prompt(PREFIX_PROMPT_TOKENS, seed=700)
    with sdk_client(gateway) as sdk:
        for _ in range(2):  # the second finds the first one's blocks in the cache
            read_through(stream_chat(sdk, content, 2))
    rising = eventually(lambda: (engine_view(gateway.base_url)["prefix_cache_hits_per_s"] or 0) > 0)
    assert rising, engine_view(gateway.base_url)

    def caught_up() -> bool:
        page, view = vllm.metrics(), engine_view(gateway.base_url)
        return (view["prefix_cache_queries_total"], view["prefix_cache_hits_total"]) == (
            sample_sum(page, "vllm:prefix_cache_queries_total"),
            sample_sum(page, "vllm:prefix_cache_hits_total"),
        )

    assert eventually(caught_up, 5), engine_view(gateway.base_url)
    view = engine_view(gateway.base_url)
    cached_tokens = view["prefix_cache_hits_total"] - before["prefix_cache_hits_total"]
    assert cached_tokens >= PREFIX_PROMPT_TOKENS // 2, view  # whole blocks of the one prompt
    assert view["prefix_caching"] is True
    assert 0 < view["rate_window_s"] <= RATE_WINDOW_S


def test_the_gateway_view_carries_vllms_kv_block_size(
    gateway: UvicornThread, vllm: VllmServer
) -> None:
    labels = info_labels(vllm.metrics(), "vllm:cache_config_info")
    assert engine_view(gateway.base_url)["kv_block_size_tokens"] == int(labels["block_size"])


@pytest.mark.flaky(reruns=2)  # a few preemptions in a burst: a slow scrape can miss them
def test_the_gateway_sees_vllm_preempt_as_a_rate(gateway: UvicornThread, vllm: VllmServer) -> None:
    """16 prompts of 4 blocks fill the 64-block cache; decode steps that need a fifth block
    preempt (vLLM recomputes the victims later)."""
    before = sample_sum(vllm.metrics(), "vllm:num_preemptions_total")
    rates: list[float] = []

    def preempting() -> bool:
        rates.append(engine_view(gateway.base_url)["preemptions_per_s"] or 0.0)
        return rates[-1] > 0

    with concurrent.futures.ThreadPoolExecutor(PREEMPTING_REQUESTS) as pool:
        contents = [prompt(PREEMPTING_PROMPT_TOKENS, seed) for seed in range(800, 816)]
        statuses = pool.map(
            lambda content: direct_chat(vllm, content, PREEMPTING_OUTPUT_TOKENS), contents
        )
        saw_rate = eventually(preempting, 60)
        assert list(statuses) == [200] * PREEMPTING_REQUESTS
    preempted = sample_sum(vllm.metrics(), "vllm:num_preemptions_total") - before
    print(f"{preempted:.0f} preemptions; the gateway's rate peaked at {max(rates):.1f}/s")
    assert preempted > 0 and saw_rate, rates[-5:]
    settled = eventually(lambda: engine_view(gateway.base_url)["preemptions_per_s"] == 0, 10)
    assert settled, engine_view(gateway.base_url)
